"""Errors that the command line turns into one line on stderr and exit code 2."""

from __future__ import annotations


class LeakbenchError(Exception):
    """Bad input or an unusable environment: a user-facing, one-line problem."""


class DatasetError(LeakbenchError):
    """A dataset cannot be found, read or used as asked."""


class ConfigError(LeakbenchError):
    """An argument or a suite setting is invalid."""


class DefenceError(ConfigError):
    """An update transform (a defence or a client, shipped or from a plugin) raised, or made an update
    holding NaN or ∞: the defence's failure, never the attack's (`fl.transform.applied`). A ConfigError
    (the suite's level cannot be run as given, as a transform's own ConfigError said before): it stops
    the run in one line naming the transform and the cell; the finished cells are kept and the same
    command resumes once the transform or its level is fixed (docs/reference/defences.md)."""


class LeakbenchWarning(UserWarning):
    """Something the user should know that does not stop the command (the CLI prints one line)."""

"""Errors that the command line turns into one line on stderr and exit code 2."""

from __future__ import annotations


class LeakbenchError(Exception):
    """Bad input or an unusable environment: a user-facing, one-line problem."""


class DatasetError(LeakbenchError):
    """A dataset cannot be found, read or used as asked."""


class ConfigError(LeakbenchError):
    """An argument or a suite setting is invalid."""


class LeakbenchWarning(UserWarning):
    """Something the user should know that does not stop the command (the CLI prints one line)."""

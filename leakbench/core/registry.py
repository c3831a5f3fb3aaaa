"""A tiny name → factory registry shared by attacks and datasets (Opacus style)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from leakbench.core.errors import ConfigError

T = TypeVar("T")

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
"""A registered name: lowercase letters, digits, '.', '_', '-', at most 64 characters. Names become
parts of cell ids, folder and file names, report tables and command lines, so a plugin's name with
a separator, a space, markup or a control character is refused when it registers."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered factory with a one-line description."""

    name: str
    factory: Callable[..., T]
    description: str


class DuplicateNameError(ConfigError, ValueError):
    """A name registered twice (a plugin taking a shipped attack's name, say)."""


class Registry(Generic[T]):
    """Maps names to factories; registering a name twice raises.

    `on_first_use` (e.g. loading installed plugins) runs once, before the first lookup.
    """

    def __init__(self, kind: str, on_first_use: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._on_first_use = on_first_use

    def register(self, name: str, factory: Callable[..., T], description: str) -> None:
        """Add `name`; a name that is not `NAME`, or is registered already, raises a ConfigError."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ConfigError(f"{self.kind} name {name!r} is not allowed: use lowercase letters, digits, '.', '_' "
                              "and '-', starting with a letter or digit, at most 64 characters")
        if name in self._entries:
            raise DuplicateNameError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = Entry(name, factory, description)

    @contextmanager
    def scoped(self, name: str, factory: Callable[..., T], description: str) -> Iterator[None]:
        """`name` registered within the block only (`leakbench.api.evaluate`)."""
        self._ready()
        self.register(name, factory, description)
        try:
            yield
        finally:
            del self._entries[name]

    def _ready(self) -> None:
        hook, self._on_first_use = self._on_first_use, None
        if hook is not None:
            hook()

    def entry(self, name: str) -> Entry[T]:
        self._ready()
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries))
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {known})") from None

    def create(self, name: str, **kwargs: object) -> T:
        return self.entry(name).factory(**kwargs)

    def names(self) -> list[str]:
        self._ready()
        return sorted(self._entries)

    def entry_as_registered(self, name: str) -> Entry[T]:
        """The entry of `name` among those registered so far, without running `on_first_use` (KeyError if none)."""
        return self._entries[name]

    def registered(self) -> list[str]:
        """The names registered so far, without running `on_first_use` (loading no plugin)."""
        return sorted(self._entries)

    def entries(self) -> list[Entry[T]]:
        return [self._entries[n] for n in self.names()]

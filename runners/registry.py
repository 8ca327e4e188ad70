"""A registry of named parts of one kind (model specs, rollout collectors), its built-ins imported on first use.

The algorithms have their own (:mod:`algos.registry`: a class decorator that also checks the class); the runners'
parts are plain frozen dataclasses, so registering one is a call: ``register(ModelSpec(name="my-lm", ...))``.
"""

from __future__ import annotations

import importlib
from typing import Generic, Iterator, TypeVar

Part = TypeVar("Part")


class Registry(Generic[Part]):
    """Parts of one ``kind`` by name; the modules in ``builtin_modules`` register the built-ins when imported, which
    happens on the first lookup (so importing the registry stays cheap)."""

    def __init__(self, kind: str, builtin_modules: tuple[str, ...]):
        self.kind = kind
        self.builtin_modules = builtin_modules
        self._parts: dict[str, Part] = {}

    def add(self, name: str, part: Part) -> Part:
        """Register ``part`` as ``name``; another part under a taken name is an error (the same one again is not)."""
        previous = self._parts.get(name)
        if previous is not None and previous != part:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._parts[name] = part
        return part

    def _load_builtins(self) -> None:
        for module in self.builtin_modules:
            importlib.import_module(module)

    def names(self) -> list[str]:
        """The registered names, built-ins included, sorted."""
        self._load_builtins()
        return sorted(self._parts)

    def get(self, name: str) -> Part:
        """The part registered as ``name`` (``KeyError`` listing the names otherwise)."""
        self._load_builtins()
        if name not in self._parts:
            raise KeyError(f"unknown {self.kind} {name!r}; available: {', '.join(sorted(self._parts))}")
        return self._parts[name]

    def __iter__(self) -> Iterator[Part]:
        """The registered parts, built-ins included, in registration order."""
        self._load_builtins()
        return iter(list(self._parts.values()))

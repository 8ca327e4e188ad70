"""A registry of named parts of one kind (model specs, rollout collectors), its built-ins imported on first use, and
the loading of plugins: the user's own modules that register parts when imported.

The algorithms have their own (:mod:`algos.registry`: a class decorator that also checks the class); the runners'
parts are plain frozen dataclasses, so registering one is a call: ``register(ModelSpec(name="my-lm", ...))``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
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
            raise KeyError(
                f"unknown {self.kind} {name!r}; available: {', '.join(sorted(self._parts))} "
                "(one of your own: load the file that registers it with --plugin FILE.py)"
            )
        return self._parts[name]

    def __iter__(self) -> Iterator[Part]:
        """The registered parts, built-ins included, in registration order."""
        self._load_builtins()
        return iter(list(self._parts.values()))


PLUGIN_MODULE_PREFIX = "mazegym_plugin_"
"""Prefix of the module name a plugin given as a ``.py`` file is imported under (``mazegym_plugin_<file stem>``)."""


def load_plugin(name: str) -> ModuleType:
    """Import the plugin ``name``: a ``.py`` file, or the dotted name of an importable module (once per process).

    A plugin registers its parts when imported (``algos.register``, ``runners.models.register``,
    ``runners.rollout.collectors.register``). ``ValueError`` says what is wrong with a name that is neither; errors
    raised by the plugin's own code pass through.
    """
    if name.endswith(".py"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise ValueError(f"plugin file {name!r} does not exist")
        module_name = PLUGIN_MODULE_PREFIX + path.stem
        loaded = sys.modules.get(module_name)
        if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve():
            return loaded
        if not module_name.isidentifier():
            raise ValueError(f"plugin file {name!r}: its name must be a Python identifier (e.g. my_plugin.py)")
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses and pickling look classes up by their module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        return module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):  # the plugin itself, not something it imports
            raise ValueError(f"plugin {name!r} is neither a .py file nor an importable module") from None
        raise

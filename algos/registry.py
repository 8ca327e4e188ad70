"""One registry of algorithms: ``algos.make("grpo", policy, lr=1e-5)``.

Built-in algorithms are imported lazily, on the first call that needs them, so that
``import algos`` (and ``algos.data``) stays torch-free for rollout workers.

Adding an algorithm takes one file (see ``examples/05_custom_algorithm.py``)::

    @algos.register("my_algo")
    class MyAlgo(algos.base.Algorithm):
        Config = MyAlgoConfig
        ...
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

DEFAULT = "grpo"
"""The algorithm used when none is named, everywhere in the project."""

ROLLOUT_SCHEMES = ("episodes", "branching")
"""How a runner may collect an algorithm's experience. ``episodes``: G whole plays of each maze from its start,
every turn of a play in one episode. ``branching``: every open cell of a maze an anchor, each of its 4 moves a
one-turn episode valued by what the policy earns after it (the 4 make a group). An algorithm lists those it trains
on as ``rollout_schemes`` (:func:`rollout_schemes`)."""

_BUILTIN_MODULES = {
    "grpo": "algos.grpo",
    "dr_grpo": "algos.dr_grpo",
    "dapo": "algos.dapo",
    "rloo": "algos.rloo",
    "gigpo": "algos.gigpo",
    "ppo": "algos.ppo",
}
_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator registering an :class:`~algos.base.Algorithm` subclass under ``name``.

    The class must define ``Config``, a dataclass whose fields are its hyperparameters, and may narrow
    ``rollout_schemes`` (default: every one of :data:`ROLLOUT_SCHEMES`). Registering a name twice with a
    different class is an error.
    """

    def decorator(cls: type) -> type:
        config = getattr(cls, "Config", None)
        if config is None or not dataclasses.is_dataclass(config):
            raise TypeError(f"algorithm {cls.__name__!r} needs a dataclass attribute `Config`")
        schemes = tuple(getattr(cls, "rollout_schemes", ROLLOUT_SCHEMES))
        if not schemes or not set(schemes) <= set(ROLLOUT_SCHEMES):
            raise TypeError(
                f"algorithm {cls.__name__!r}: rollout_schemes={schemes!r} must name one or more of {ROLLOUT_SCHEMES}"
            )
        cls.rollout_schemes = schemes
        previous = _REGISTRY.get(name)
        if previous is not None and previous.__qualname__ != cls.__qualname__:
            raise ValueError(f"algorithm name {name!r} is already registered to {previous.__name__}")
        _REGISTRY[name] = cls
        cls.name = name
        return cls

    return decorator


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES.values():
        importlib.import_module(module)


def available() -> list[str]:
    """Names of all registered algorithms, built-ins included, sorted (default first)."""
    _load_builtins()
    return sorted(_REGISTRY, key=lambda n: (n != DEFAULT, n))


def get(name: str) -> type:
    """The algorithm class registered under ``name`` (clear error listing valid names)."""
    if name in _BUILTIN_MODULES and name not in _REGISTRY:
        importlib.import_module(_BUILTIN_MODULES[name])
    if name not in _REGISTRY:
        raise KeyError(f"unknown algorithm {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


def rollout_schemes(name: str) -> tuple[str, ...]:
    """The rollout schemes (:data:`ROLLOUT_SCHEMES`) algorithm ``name`` trains on, the one it prefers first."""
    return get(name).rollout_schemes


def config_class(name: str) -> type:
    """The typed config dataclass of algorithm ``name`` (e.g. to build its typed config)."""
    return get(name).Config


def make_config(name: str, config: Any = None, **overrides: Any) -> Any:
    """Build ``name``'s config from an optional base config plus keyword overrides.

    Unknown keys raise a ``TypeError`` that lists the valid ones.
    """
    cls = config_class(name)
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise TypeError(f"unknown config key(s) {unknown} for algorithm {name!r}; valid keys: {', '.join(valid)}")
    if config is None:
        config = cls()
    elif not isinstance(config, cls):
        raise TypeError(f"config for {name!r} must be a {cls.__name__}, got {type(config).__name__}")
    return dataclasses.replace(config, **overrides)


def make(name: str = DEFAULT, policy: Any = None, config: Any = None, **overrides: Any) -> Any:
    """Instantiate algorithm ``name`` training ``policy``; keyword args override config fields."""
    if policy is None:
        raise TypeError("algos.make needs a policy: algos.make(name, policy, **config)")
    return get(name)(policy, make_config(name, config, **overrides))

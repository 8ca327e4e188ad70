"""One registry of the ways a run collects its training episodes: ``rollout.collector`` names one.

A :class:`Collector` brings everything the runners need to know about one way of turning a step's mazes into
:class:`~algos.data.Episode` groups: the function that collects them, the rollout scheme its episodes follow (what
an algorithm says it trains on, ``algos.ROLLOUT_SCHEMES``), its typed settings and their checks, whether its turns
carry sampling log-probs, whether it leaves torch's global random generator alone (what overlapped collection and
rollout threads need), and the line ``mazegym train --dry-run`` prints for it. The runners ask the collector; no
other module under ``runners/`` names a concrete collector (the layering test checks it).

``rollout.branching=true`` is the same as ``rollout.collector=branches`` (and ``false`` as ``plays``): the switch
between the two built-ins that presets, config files and saved runs use. Built-in collectors are imported lazily.
Adding a collector takes one file that calls :func:`register` (docs/extending.md)::

    register(Collector(name="my-plays", description="...", collect=collect_my_plays))
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from runners.registry import Registry

BUILTIN_MODULES = ("runners.rollout.collectors.plays", "runners.rollout.collectors.branches")
"""Modules that register the built-in collectors when imported."""
PLAYS = "plays"
"""The collector of ``rollout.branching=false``: G sampled plays of every maze from its start."""
BRANCHES = "branches"
"""The collector of ``rollout.branching=true``: the 4 one-move branches at every open cell of every maze."""


def _no_settings(rollout: Any) -> None:
    return None


def _draws_randomness(rollout: Any) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class Collector:
    """One way of collecting a step's training episodes (:func:`runners.rollout.collect.collect_groups` calls the one
    the rollout settings select). ``rollout`` arguments are a :class:`~runners.rollout.collect.RolloutConfig`."""

    name: str
    """The ``rollout.collector`` value that selects it."""
    description: str
    """One line for listings."""
    collect: Callable[..., list[Any]]
    """``collect(generator, mazes, rollout, encoder, weights_version, seed, group_offset)``: the episodes of the
    mazes, group ids from ``group_offset``, each maze's seeds and groups a function of its index alone (so slices of
    a step played apart give what one call gives)."""
    scheme: str = "episodes"
    """The rollout scheme of its episodes (one of ``algos.ROLLOUT_SCHEMES``): algorithms list the schemes they train
    on, and a run moves to a scheme its algorithm trains on (``runners.config.schemes``)."""
    settings: Callable[[Any], Any] = _no_settings
    """``settings(rollout)``: its own typed settings, read from ``rollout``; ``ValueError`` naming the key when one
    is out of range or the rollout settings do not suit it."""
    sampled: bool = True
    """Whether its turns carry sampling log-probs (else the trainer must recompute old log-probs)."""
    draws_no_torch_randomness: Callable[[Any], bool] = _draws_randomness
    """``draws_no_torch_randomness(rollout)``: whether collecting leaves torch's global random generator alone, so it
    may run beside an update (``loop.overlap_generation``) or on threads sharing a generator."""
    plan: Callable[[Any], str] | None = None
    """``plan(config)``: what one step collects, in words, for ``mazegym train --dry-run`` (``config`` is a
    :class:`runners.config.TrainConfig`); None prints the description."""


_REGISTRY: Registry[Collector] = Registry("collector", BUILTIN_MODULES)


def register(collector: Collector) -> Collector:
    """Register ``collector`` under its name; registering another collector under a taken name is an error."""
    return _REGISTRY.add(collector.name, collector)


def available() -> list[str]:
    """Names of the registered collectors, sorted."""
    return _REGISTRY.names()


def get(name: str) -> Collector:
    """The collector registered as ``name`` (``KeyError`` listing the names otherwise)."""
    return _REGISTRY.get(name)


def name_of(rollout: Any) -> str:
    """The name of the collector rollout settings select: ``rollout.collector``, or when it is empty ``branches``
    with ``rollout.branching`` and ``plays`` without. ``rollout`` may be a saved config's ``rollout`` mapping.
    ``ValueError`` when ``rollout.branching=true`` names another collector."""
    read = rollout.get if isinstance(rollout, dict) else lambda key, default: getattr(rollout, key, default)
    named, branching = str(read("collector", "") or ""), bool(read("branching", False))
    if branching and named not in ("", BRANCHES):
        raise ValueError(
            f"rollout.branching=true selects the {BRANCHES} collector but rollout.collector={named}: "
            "set one of them (rollout.branching=false to use another collector)"
        )
    return named or (BRANCHES if branching else PLAYS)


def of(rollout: Any) -> Collector:
    """The collector ``rollout`` selects (:func:`name_of`); ``ValueError`` when it is not registered."""
    name = name_of(rollout)
    try:
        return get(name)
    except KeyError as exc:
        raise ValueError(f"rollout.collector={name!r} is not registered; choose one of {', '.join(available())}") from (
            exc
        )


def check(rollout: Any) -> Collector:
    """The collector ``rollout`` selects, after checking its settings (``ValueError`` naming the problem)."""
    collector = of(rollout)
    collector.settings(rollout)
    return collector


def draws_no_torch_randomness(rollout: Any) -> bool:
    """Whether collecting with ``rollout`` leaves torch's global random generator alone (see :class:`Collector`)."""
    return of(rollout).draws_no_torch_randomness(rollout)

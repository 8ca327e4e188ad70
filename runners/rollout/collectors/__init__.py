"""One registry of the ways a run collects its training episodes: ``rollout.collector.name`` names one.

A :class:`Collector` brings everything the runners need to know about one way of turning a step's mazes into
:class:`~algos.data.Episode` groups: the function that collects them, the rollout scheme its episodes follow (what
an algorithm says it trains on, ``algos.ROLLOUT_SCHEMES``), its settings (the ``rollout.collector`` section: a
dataclass extending :class:`CollectorConfig`) and the rules across keys it owns, whether its turns carry sampling
log-probs, whether it leaves torch's global random generator alone (what overlapped collection and rollout threads
need), and the line ``mazegym train --dry-run`` prints for it. The runners ask the collector; no other module under
``runners/`` names a concrete collector (the layering test checks it).

Built-in collectors are imported lazily. Adding a collector takes one file that calls :func:`register`
(docs/extending.md)::

    register(Collector(name="my-plays", description="...", collect=collect_my_plays))
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from runners.registry import Registry

BUILTIN_MODULES = ("runners.rollout.collectors.plays", "runners.rollout.collectors.branches")
"""Modules that register the built-in collectors when imported."""
PLAYS = "plays"
"""The default collector: G sampled plays of every maze from its start."""


def _registered(name: str) -> str | None:
    if name in available():
        return None
    return (
        f"is not a registered collector; choose one of {', '.join(available())} "
        "(one of your own: load the file that registers it with --plugin FILE.py)"
    )


@dataclasses.dataclass
class CollectorConfig:
    """The settings every collector has (its name); a collector's own settings extend this class."""

    name: str = dataclasses.field(default=PLAYS, metadata={"check": _registered})
    """The registered collector that gathers the training episodes (runners.rollout.collectors): "plays" (G sampled
    plays of every maze from its start), "branches" (the 4 one-move branches at every open cell) or one a project
    adds. Its own settings follow it in this section.
    """


def _no_problems(rollout: Any) -> list[str]:
    return []


def _draws_randomness(rollout: Any) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class Collector:
    """One way of collecting a step's training episodes (:func:`runners.rollout.collect.collect_groups` calls the one
    the rollout settings select). ``rollout`` arguments are a :class:`~runners.rollout.collect.RolloutConfig`."""

    name: str
    """The ``rollout.collector.name`` value that selects it."""
    description: str
    """One line for listings."""
    collect: Callable[..., list[Any]]
    """``collect(generator, mazes, rollout, encoder, weights_version, seed, group_offset)``: the episodes of the
    mazes, group ids from ``group_offset``, each maze's seeds and groups a function of its index alone (so slices of
    a step played apart give what one call gives)."""
    scheme: str = "episodes"
    """The rollout scheme of its episodes (one of ``algos.ROLLOUT_SCHEMES``): algorithms list the schemes they train
    on, and a run whose algorithm cannot train on its collector's scheme is refused."""
    settings: type = CollectorConfig
    """Its settings: a dataclass extending :class:`CollectorConfig` (the ``rollout.collector`` section when its
    name is chosen), each field with a docstring and its check as metadata."""
    check: Callable[[Any], list[str]] = _no_problems
    """``check(rollout)``: what is wrong with its settings (``rollout.collector``) beside the other rollout settings
    (empty when nothing is): the rules across keys that it owns."""
    sampled: bool = True
    """Whether its turns carry sampling log-probs (else the trainer must recompute old log-probs)."""
    draws_no_torch_randomness: Callable[[Any], bool] = _draws_randomness
    """``draws_no_torch_randomness(rollout)``: whether collecting leaves torch's global random generator alone, so it
    may run beside an update (``loop.overlap_generation``) or on threads sharing a generator."""
    plan: Callable[[Any, int, int], str] | None = None
    """``plan(rollout, mazes_per_step, maze_size)``: what one step collects, in words, for ``mazegym train
    --dry-run``; None prints the description."""


_REGISTRY: Registry[Collector] = Registry("collector", BUILTIN_MODULES)


def register(collector: Collector) -> Collector:
    """Register ``collector`` under its name; registering another collector under a taken name, or one whose settings
    do not extend :class:`CollectorConfig`, is an error."""
    if not (isinstance(collector.settings, type) and issubclass(collector.settings, CollectorConfig)):
        raise ValueError(f"collector {collector.name!r}: its settings must be a dataclass extending CollectorConfig")
    return _REGISTRY.add(collector.name, collector)


def available() -> list[str]:
    """Names of the registered collectors, sorted."""
    return _REGISTRY.names()


def get(name: str) -> Collector:
    """The collector registered as ``name`` (``KeyError`` listing the names otherwise)."""
    return _REGISTRY.get(name)


def settings_for(name: str, **values: Any) -> CollectorConfig:
    """Fresh settings of collector ``name`` (its settings class), ``values`` set."""
    return get(name).settings(name=name, **values)


def of(rollout: Any) -> Collector:
    """The collector rollout settings select (``rollout.collector.name``); ``ValueError`` when it is not
    registered."""
    name = rollout.collector.name
    try:
        return get(name)
    except KeyError:
        raise ValueError(f"rollout.collector.name={name!r} {_registered(name)}") from None


def draws_no_torch_randomness(rollout: Any) -> bool:
    """Whether collecting with ``rollout`` leaves torch's global random generator alone (see :class:`Collector`)."""
    return of(rollout).draws_no_torch_randomness(rollout)

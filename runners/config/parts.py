"""The parts a run chooses, each by one key, and the settings section each part owns.

A :class:`Slot` is a place in the config where a part goes: the section (``model``), the key that names the part
(``model.kind``), and where the part's settings class is found (a registry). The resolver types each section with the
chosen part's class; the help lists the chosen parts' keys; validation runs each part's rules. The algorithm is the
one part whose settings sit under ``algo.params`` (written ``algo.<field>``) and are checked by its own config class.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from runners import models
from runners.config.runner import RUNNERS, RunnerConfig
from runners.rollout import collectors
from runners.rollout.generation.engines import ENGINES, EngineConfig


@dataclasses.dataclass(frozen=True)
class Slot:
    """A section of the config that the chosen part types."""

    section: str
    """Dotted path of the section (``rollout.collector``)."""
    selector: str
    """The field of the section that names the part (``name``)."""
    what: str
    """The part in words, for messages (``collector``)."""
    base: type
    """What every part's settings extend: the fields every run has in this section."""
    names: Callable[[], list[str]]
    """The parts that may be chosen (registered ones included)."""
    settings_class: Callable[[str], type]
    """The settings class of the part of that name (``KeyError`` for an unknown one)."""

    @property
    def key(self) -> str:
        """The dotted key that chooses the part (``rollout.collector.name``)."""
        return f"{self.section}.{self.selector}"

    def settings(self, name: str) -> Any:
        """Fresh settings of part ``name``, its selector set."""
        return self.settings_class(name)(**{self.selector: name})


SLOTS = (
    Slot("model", "kind", "model kind", models.ModelConfig, models.available, lambda name: models.get(name).settings),
    Slot(
        "rollout.collector",
        "name",
        "collector",
        collectors.CollectorConfig,
        collectors.available,
        lambda name: collectors.get(name).settings,
    ),
    Slot("engine", "name", "engine", EngineConfig, lambda: list(ENGINES), ENGINES.__getitem__),
    Slot("runner", "kind", "runner", RunnerConfig, lambda: list(RUNNERS), RUNNERS.__getitem__),
)
"""Every slot, in the order of the config's sections."""


def section(config: Any, path: str) -> Any:
    """The section at dotted ``path`` of a config (a dataclass, or its dict form)."""
    for part in path.split("."):
        config = config[part] if isinstance(config, dict) else getattr(config, part)
    return config


def chosen(config: Any) -> dict[str, str]:
    """Slot key -> the name of the part ``config`` chose, the algorithm's (``algo.name``) included."""
    names = {slot.key: getattr(section(config, slot.section), slot.selector) for slot in SLOTS}
    return {**names, "algo.name": config.algo.name}


def own_fields(cls: type, slot: Slot) -> list[dataclasses.Field]:
    """The fields a part's settings class adds to what every part of its slot has (``slot.base``'s)."""
    generic = {f.name for f in dataclasses.fields(slot.base)}
    return [f for f in dataclasses.fields(cls) if f.name not in generic]


def generic_keys(config: Any = None, prefix: str = "") -> list[str]:
    """The keys every run has, whatever parts it chose: the generic sections' settings and, of each part's section,
    the fields its slot's base declares (the key that chooses the part included); ``algo.<field>`` settings belong to
    the algorithm and provenance is no setting."""
    if config is None:
        from runners.config.schema import TrainConfig

        config = TrainConfig()
    keys = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("provenance") or f.metadata.get("algorithm"):
            continue
        path = f"{prefix}{f.name}"
        slot = next((s for s in SLOTS if s.section == path), None)
        if slot is not None:
            keys += [f"{path}.{g.name}" for g in dataclasses.fields(slot.base)]
        elif dataclasses.is_dataclass(value):
            keys += generic_keys(value, path + ".")
        else:
            keys.append(path)
    return keys

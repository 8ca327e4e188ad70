"""Every key of every part has exactly one check, the settings every run has stay few, and the keys a user may set
are the ones the help lists."""

from __future__ import annotations

import dataclasses

import pytest

import algos
from algos.base import RANGES
from runners.config import TrainConfig, fields, validation
from runners.config.parts import SLOTS, generic_keys, own_fields

GENERIC_LIMIT = 60
"""At most this many keys every run has; the rest belong to the part that uses them."""


def every_key() -> dict[str, dataclasses.Field]:
    """Dotted key -> field of every setting of the generic schema and of every registered part (each part's section
    typed with its own settings class)."""
    keys = {key: f for key, _, f in fields.settings(TrainConfig())}
    for slot in SLOTS:
        for name in slot.names():
            settings = slot.settings(name)
            keys.update({f"{slot.section}.{key}": f for key, _, f in fields.settings(settings)})
    return keys


@pytest.mark.parametrize("key", sorted(every_key()))
def test_every_key_has_exactly_one_validator(key):
    f = every_key()[key]
    assert len(fields.validators(f)) == 1, f"{key}: {fields.validators(f) or 'no check'}"


def test_the_algorithms_check_their_own_keys():
    for name in algos.available():
        if not algos.get(name).__module__.startswith("algos."):
            continue  # one a test registered
        for f in dataclasses.fields(algos.config_class(name)):
            if f.type in ("int", "float", int, float):
                assert f.name in RANGES, f"algo.{f.name} of {name} has no range"
    params = next(f for f in dataclasses.fields(TrainConfig().algo) if f.name == "params")
    assert params.metadata == {"algorithm": True} and not fields.validators(params)


def test_no_table_checks_a_key_a_second_time():
    for name in ("BOUNDS", "CHOICES"):
        assert not hasattr(validation, name)
    generic = set(generic_keys())
    for rule in validation.RULES:
        source = rule.__code__.co_consts
        assert not any(isinstance(c, str) and c.endswith(" is out of range") for c in source), rule.__name__
    assert "model.kind" in generic and "rollout.collector.name" in generic


def test_the_settings_every_run_has_stay_few():
    keys = generic_keys()
    assert len(keys) <= GENERIC_LIMIT, keys
    assert len(keys) == len(set(keys))
    part_keys = [
        f"{slot.section}.{f.name}"
        for slot in SLOTS
        for name in slot.names()
        for f in own_fields(slot.settings_class(name), slot)
    ]
    assert not set(part_keys) & set(keys)
    assert {"model.vision_width", "rollout.collector.samples", "runner.num_workers", "engine.rollout_threads"} <= set(
        part_keys
    )


def test_every_selector_names_a_part_and_every_part_class_extends_its_slots_base():
    for slot in SLOTS:
        assert slot.names()
        for name in slot.names():
            cls = slot.settings_class(name)
            assert issubclass(cls, slot.base), (slot.key, name)
            assert getattr(slot.settings(name), slot.selector) == name


@pytest.mark.parametrize("key", sorted(k for k, f in every_key().items() if "range" in f.metadata))
def test_a_value_outside_a_range_is_refused_naming_the_key(key):
    f = every_key()[key]
    low, high, low_open = f.metadata["range"]
    bad = (low - 1 if not low_open else low) if low is not None else high + 1
    problem = fields.problem(bad, f)
    assert problem and "out of range" in problem
    assert fields.problem(float("nan"), f) == "is not a finite number"


def test_a_part_whose_settings_do_not_extend_its_slots_base_is_refused_when_registered():
    from runners import models
    from runners.rollout import collectors

    @dataclasses.dataclass
    class Loose:
        width: int = 1

    with pytest.raises(ValueError, match="its settings must be a dataclass extending ModelConfig"):
        models.register(models.ModelSpec(name="loose", description="x", build=lambda *a: None, settings=Loose))
    with pytest.raises(ValueError, match="its settings must be a dataclass extending CollectorConfig"):
        collectors.register(collectors.Collector(name="loose", description="x", collect=list, settings=Loose))
    assert "loose" not in models.available() and "loose" not in collectors.available()

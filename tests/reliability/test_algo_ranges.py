"""Every numeric field of every algorithm's config has a range, checked before any work (`--dry-run` too)."""

import dataclasses

import pytest

import algos
from algos.base import RANGES
from runners import cli

CONFIGS = {name: algos.make_config(name) for name in algos.available()}


def _numeric_fields(config) -> list[str]:
    hints = {f.name: str(f.type) for f in dataclasses.fields(config)}
    return [name for name, kind in hints.items() if kind.split(" |")[0] in ("int", "float")]


def test_every_numeric_field_has_a_range():
    missing = {name: sorted(set(_numeric_fields(c)) - set(RANGES)) for name, c in CONFIGS.items()}
    assert {k: v for k, v in missing.items() if v} == {}
    for name, config in CONFIGS.items():  # and every default is inside it
        algos.get(name).check_config(config)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("value", [-1e9, 1e300, float("nan"), True, "1"])
def test_a_value_outside_its_range_is_refused_naming_the_field(name, value):
    for field in _numeric_fields(CONFIGS[name]):
        config = dataclasses.replace(CONFIGS[name], **{field: value})
        with pytest.raises(ValueError, match=rf"^{field} must be"):
            algos.get(name).check_config(config)


@pytest.mark.parametrize(
    "override, field",
    [
        ("algo.lr=1e300", "lr"),
        ("algo.weight_decay=-5", "weight_decay"),
        ("algo.clip_eps_low=-1", "clip_eps_low"),
        ("algo.kl_coef=-1", "kl_coef"),
        ("algo.entropy_coef=-100", "entropy_coef"),
    ],
)
def test_dry_run_refuses_out_of_range_algorithm_fields(override, field, capsys):
    assert cli.main(["train", "--dry-run", override]) == 2
    err = capsys.readouterr().err
    assert f"{field} must be" in err and "Traceback" not in err

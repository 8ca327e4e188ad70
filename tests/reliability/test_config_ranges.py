"""Values that used to pass --dry-run and fail minutes later (or train to rc 0 on NaN) are refused up front."""

from __future__ import annotations

import pytest

from runners import cli
from runners.config import ConfigError, apply_overrides, validate
from runners.config.presets import TRAINING_PRESETS, get_preset

BAD = {
    "algo.lr=nan": "algo.lr",
    "algo.lr=inf": "algo.lr",
    "algo.max_grad_norm=nan": "algo.max_grad_norm",
    "sft.lr=nan": "sft.lr",
    "sft.lr=-1": "sft.lr",
    "rollout.temperature=nan": "rollout.temperature",
    "rollout.temperature=-1": "rollout.temperature",
    "rollout.top_p=7": "rollout.top_p",
    "rollout.max_new_tokens=0": "rollout.max_new_tokens",
    "eval.temperature=nan": "eval.temperature",
    "model.tiny_hidden=0": "model.tiny_hidden",
    "model.tiny_hidden=-64": "model.tiny_hidden",
    "model.tiny_layers=0": "model.tiny_layers",
    "run_dir=": "run_dir",
    "loop.mazes_per_step=1000000000": "loop.mazes_per_step",
    "maze.generator=nope": "maze.generator",
    "lora.alpha=-4": "lora.alpha",
    "lora.dropout=5": "lora.dropout",
    "model.device=nope": "model.device",
    "loop.max_minutes=nan": "loop.max_minutes",
    "loop.seed=-1": "loop.seed",
    "maze.stream_seed=-1": "maze.stream_seed",
    "sft.detours=-1": "sft.detours",
    "model.localization_weight=-1": "model.localization_weight",
    "model.image_cell_px=0": "model.image_cell_px",
    "rollout.history_k=-1": "rollout.history_k",
    "lora.rank=100000": "lora.rank",
    "runner.num_threads=-1": "runner.num_threads",
    "engine.rollout_threads=0": "engine.rollout_threads",
}


@pytest.mark.parametrize("override", sorted(BAD))
def test_refused_naming_the_key(override):
    with pytest.raises(ConfigError, match=BAD[override].replace(".", r"\.")):
        validate(apply_overrides(get_preset("cpu-maze-vlm"), [override]), need_model=False)


@pytest.mark.parametrize("override", ["algo.lr=nan", "rollout.top_p=7", "model.device=nope"])
def test_dry_run_exits_2_with_one_line(override, capsys):
    assert cli.main(["train", "--dry-run", override]) == 2
    err = capsys.readouterr().err
    assert "config error" in err and BAD[override] in err and "Traceback" not in err


@pytest.mark.parametrize("preset", sorted(TRAINING_PRESETS))
def test_every_preset_is_in_range(preset):
    validate(get_preset(preset), need_model=False)


def _numeric_settings() -> list[str]:
    """Every int or float setting of the default preset outside ``algo`` (whose algorithm checks its own)."""
    from runners.config import to_dict

    def walk(data: dict, prefix: str = ""):
        for key, value in data.items():
            if isinstance(value, dict):
                yield from walk(value, f"{prefix}{key}.")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                yield f"{prefix}{key}"

    saved = to_dict(get_preset("cpu-maze-vlm"))
    return [key for key in walk(saved) if not key.startswith("algo.") and key != "config_version"]


@pytest.mark.parametrize("key", _numeric_settings())
def test_every_numeric_setting_has_a_lower_bound(key):
    """A setting added later without a range fails here: a negative count, size, seed or rate is never meant."""
    with pytest.raises(ConfigError, match=key.rsplit(".", 1)[-1]):
        validate(apply_overrides(get_preset("cpu-maze-vlm"), [f"{key}=-1000000000000"]), need_model=False)

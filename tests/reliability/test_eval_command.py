"""`mazegym eval` evaluates the run's own config and latest checkpoint, and refuses a dir that holds no run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runners.build as build
import runners.rollout.generation.adapters as adapters
import runners.train.steps as steps
from reliability_helpers import write_fake_checkpoint
from runners import config as cfgmod
from runners.train.checkpoint import CheckpointManager
from runners.cli import main
from runners.config.presets import get_preset


@pytest.fixture
def calls(monkeypatch):
    """Record what eval would build and evaluate, without loading a model."""
    seen = {}

    def build_generator(config, model_dir, adapter=None, version=0):
        seen.update(config=config, model_dir=Path(model_dir), adapter=Path(adapter) if adapter else None)
        return object()

    def eval_step(generator, config, set_name=None):
        return {
            "solve_rate": 0.5,
            "solved": 32,
            "episodes": 64,
            "spl": 0.4,
            "invalid_action_rate": 0.0,
            "mean_moves": 7.0,
            "by_size": {},
        }

    def check_adapter(model_dir, adapter, lora=None):
        seen.update(checked_against=lora)

    monkeypatch.setattr(build, "build_generator", build_generator)
    monkeypatch.setattr(steps, "eval_step", eval_step)
    monkeypatch.setattr(adapters, "check_adapter", check_adapter)
    return seen


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    config = cfgmod.apply_overrides(
        get_preset("cpu-tiny"),
        [f"run_dir={run}", f"model.path={model}", "sft.enabled=never", "rollout.max_moves=31", "maze.heldout_sets=[]"],
    )
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfgmod.to_dict(config)))
    manager = CheckpointManager(run / "checkpoints", log=lambda m: None)
    manager.start_run("none")
    for step in (1, 2):
        manager.save(step, write_fake_checkpoint)
    return run


def test_eval_of_a_run_dir_uses_its_config_and_latest_checkpoint(tmp_path, calls, capsys):
    run = _run(tmp_path)
    assert main(["eval", "--run-dir", str(run)]) == 0
    assert calls["adapter"] == run / "checkpoints" / "step_000002" / "adapter"
    assert calls["config"].rollout.max_moves == 31 and calls["model_dir"] == tmp_path / "model"
    assert calls["checked_against"] == calls["config"].lora  # the run's own adapter, held to the run's LoRA
    out = capsys.readouterr().out
    assert "Evaluated checkpoint" in out and "step_000002" in out
    assert json.loads((run / "eval" / "eval.json").read_text())["adapter"].endswith("step_000002/adapter")


def test_overrides_still_apply_on_top_of_the_runs_config(tmp_path, calls):
    run = _run(tmp_path)
    assert main(["eval", "--run-dir", str(run), "rollout.max_moves=12"]) == 0
    assert calls["config"].rollout.max_moves == 12 and calls["config"].model.path == str(tmp_path / "model")


def test_eval_refuses_a_dir_that_holds_no_run(tmp_path, calls, capsys):
    missing = tmp_path / "no" / "such" / "dir"
    assert main(["eval", "--run-dir", str(missing)]) == 2
    assert "holds no mazegym run" in capsys.readouterr().err
    assert not missing.exists() and not calls


def test_eval_with_a_preset_still_evaluates_the_run(tmp_path, calls, capsys):
    run = _run(tmp_path)
    model = tmp_path / "model"
    assert (
        main(["eval", "--preset", "cpu-tiny", "--run-dir", str(run), f"model.path={model}", "sft.enabled=never"]) == 0
    )
    assert calls["adapter"] == run / "checkpoints" / "step_000002" / "adapter"
    assert (
        calls["config"].rollout.max_moves == get_preset("cpu-tiny").rollout.max_moves
    )  # the preset replaced the run's
    assert "Evaluated checkpoint" in capsys.readouterr().out


def test_eval_with_a_preset_refuses_a_dir_that_holds_no_run(tmp_path, calls, capsys):
    missing = tmp_path / "nothing"
    assert main(["eval", "--preset", "cpu-tiny", "--run-dir", str(missing)]) == 2
    assert "holds no mazegym run" in capsys.readouterr().err
    assert not missing.exists() and not calls


def test_eval_never_rebuilds_the_runs_base_model(tmp_path, calls, monkeypatch):
    """An override that changes the tiny model's build recipe must not rebuild RUN/base_model under its adapters."""
    run = tmp_path / "run"
    config = cfgmod.apply_overrides(get_preset("cpu-tiny"), [f"run_dir={run}", "sft.enabled=never"])
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfgmod.to_dict(config)))
    base = run / "base_model"
    base.mkdir()
    (base / "config.json").write_text('{"built": "by training"}')
    (base / "mazegym_base.json").write_text('{"recipe": "the run\'s own"}')
    rebuilt = []
    monkeypatch.setattr(build, "prepare_base_model", lambda c: rebuilt.append(c) or base)
    assert main(["eval", "--run-dir", str(run), "rollout.max_moves=30", "--sets", "heldout-7x7"]) == 0
    assert not rebuilt and calls["model_dir"] == base
    assert (base / "config.json").read_text() == '{"built": "by training"}'


@pytest.mark.parametrize("text", ["[]", "{}", '{"model": []}', "not json", "[" * 100_000 + "]" * 100_000])
def test_a_config_json_mazegym_did_not_write_is_refused_naming_it(tmp_path, calls, capsys, text):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(text)
    assert main(["eval", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "not a mazegym run config" in err and "Traceback" not in err
    assert "config" not in calls  # nothing was built, no random model evaluated


def test_eval_never_builds_a_missing_base_model_into_the_run(tmp_path, calls, monkeypatch, capsys):
    run = tmp_path / "run"
    config = cfgmod.apply_overrides(get_preset("cpu-tiny"), [f"run_dir={run}", "sft.enabled=never"])
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfgmod.to_dict(config)))
    built = []
    monkeypatch.setattr(build, "prepare_base_model", lambda c: built.append(c))
    assert main(["eval", "--run-dir", str(run)]) == 2
    assert "never builds a run's model" in capsys.readouterr().err
    assert not built and sorted(p.name for p in run.iterdir()) == ["config.json"] and "config" not in calls


def test_eval_serve_and_export_ask_one_question_which_weights(tmp_path, calls):
    """resolve_weights: the latest valid checkpoint, else the final adapter, else the SFT result or base model."""
    import shutil

    from runners.artifacts.export import export

    run = _run(tmp_path)
    config = cfgmod.apply_overrides(get_preset("cpu-tiny"), [f"run_dir={run}", f"model.path={tmp_path / 'model'}"])
    config.sft.enabled = "never"
    weights = build.resolve_weights(config)
    assert (weights.source, weights.checkpoint) == ("checkpoint", run / "checkpoints" / "step_000002")
    assert weights.adapter == weights.checkpoint / "adapter" and weights.trained_by_rl
    first = build.resolve_weights(config, checkpoint=str(run / "checkpoints" / "step_000001"))
    assert first.adapter == run / "checkpoints" / "step_000001" / "adapter"

    shutil.rmtree(run / "checkpoints")
    with pytest.raises(ValueError, match="no valid checkpoint"):  # a checkpoint asked for by name must exist
        build.resolve_weights(config, checkpoint="latest")
    (run / "final_adapter").mkdir()
    (run / "final_adapter" / "adapter_model.safetensors").write_bytes(b"")
    weights = build.resolve_weights(config)
    assert (weights.source, weights.adapter, weights.checkpoint) == ("final adapter", run / "final_adapter", None)

    shutil.rmtree(run / "final_adapter")
    weights = build.resolve_weights(config)
    assert (weights.source, weights.adapter, weights.model_dir) == ("base model", None, tmp_path / "model")
    assert not weights.trained_by_rl and "no RL checkpoint" in weights.label
    given = build.resolve_weights(config, adapter=tmp_path / "elsewhere")
    assert (given.source, given.adapter) == ("given", tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError, match="no trained adapter"):  # export ships RL results only
        export(config)


def test_eval_names_an_unknown_set_before_any_work(tmp_path, calls, capsys):
    run = _run(tmp_path)
    assert main(["eval", "--run-dir", str(run), "--sets", "heldout-7x7,nope"]) == 2
    err = capsys.readouterr().err
    assert "--sets: no eval set called nope; choose from" in err and "damaged" not in err
    assert not calls  # refused before a model was built


def test_eval_first_plays_the_first_mazes_of_each_set_and_says_what_it_plays(tmp_path, calls, capsys):
    run = _run(tmp_path)
    assert main(["eval", "--run-dir", str(run), "--sets", "heldout-7x7,heldout-5x5", "--first", "3"]) == 0
    assert calls["config"].eval.set_mazes == {"heldout-7x7": 3, "heldout-5x5": 3}
    out = capsys.readouterr().out
    assert "[eval] heldout-7x7: 3 mazes ..." in out and "[eval] heldout-5x5: 3 mazes ..." in out

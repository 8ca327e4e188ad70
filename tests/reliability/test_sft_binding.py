"""SFT results are bound to the RL checkpoints built on them: replaced atomically, never rerun under checkpoints,
and a checkpoint trained on another (or a missing) SFT result is refused by resume, eval and export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runners.train.sft as sftmod
from runners.train import fingerprints, sft_result
from reliability_helpers import write_fake_checkpoint
from runners import build
from runners.cli import main
from runners.config import ConfigError, apply_overrides, to_dict
from runners.config.presets import get_preset
from runners.train.checkpoint import CheckpointManager


def _config(run: Path, *extra: str):
    return apply_overrides(
        get_preset("cpu-tiny"),
        [f"run_dir={run}", "sft.steps=2", "sft.batch_size=4", "logging.progress=false", "maze.heldout_sets=[]", *extra],
    )


def _checkpoint(run: Path, fingerprint: str | None) -> Path:
    """A (meaningless) RL checkpoint of ``run`` recording that it was trained on SFT result ``fingerprint``."""
    state = json.dumps({"step": 1, "config": to_dict(_config(run)), "sft_fingerprint": fingerprint}).encode()
    manager = CheckpointManager(run / "checkpoints", log=lambda m: None)
    manager.start_run("none")
    return manager.save(1, lambda d: write_fake_checkpoint(d, {"state.json": state}))


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """A run dir holding a finished SFT stage of the tiny text model (and its config)."""
    run = tmp_path_factory.mktemp("sft-binding") / "run"
    config = _config(run)
    build.run_sft(config, log=lambda m: None)
    (run / "config.json").write_text(json.dumps(to_dict(config)))
    return run


def test_the_sft_result_records_its_fingerprint(sft_run):
    fingerprint = sft_result.recorded_fingerprint(_config(sft_run))
    assert fingerprint == fingerprints.result_fingerprint(sft_run / "sft" / "model")
    assert not [p.name for p in sft_run.iterdir() if p.name.startswith(".sft")]  # no temporary dir left


def test_a_killed_sft_rerun_leaves_the_previous_result_whole(sft_run, tmp_path, monkeypatch):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    config = _config(run)
    before = sft_result.recorded_fingerprint(config)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sftmod, "train_sft", killed)
    with pytest.raises(KeyboardInterrupt):
        build.run_sft(config, log=lambda m: None)
    assert sft_result.recorded_fingerprint(config) == before
    assert fingerprints.result_fingerprint(run / "sft" / "model") == before
    assert not [p.name for p in run.iterdir() if p.name.startswith(".sft")]


def test_sft_is_not_rerun_under_rl_checkpoints(sft_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    _checkpoint(run, sft_result.recorded_fingerprint(_config(run)))
    before = fingerprints.result_fingerprint(run / "sft" / "model")
    with pytest.raises(ConfigError, match="holds RL checkpoints"):
        build.run_sft(_config(run), log=lambda m: None)
    assert fingerprints.result_fingerprint(run / "sft" / "model") == before


def test_a_checkpoint_of_another_sft_result_is_refused(sft_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    ckpt = _checkpoint(run, "0" * 64)
    with pytest.raises(ConfigError, match="another SFT result"):
        build.refuse_other_sft(_config(run), ckpt)
    assert main(["eval", "--run-dir", str(run)]) == 2
    assert "another SFT result" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="another SFT result"):
        build.open_run(_config(run, "checkpoint.resume=latest"), log=lambda m: None)


def test_a_checkpoint_whose_sft_result_is_missing_is_refused(sft_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    ckpt = _checkpoint(run, sft_result.recorded_fingerprint(_config(run)))
    build.refuse_other_sft(_config(run), ckpt)  # the same SFT result: accepted
    (run / "sft" / "DONE").unlink()  # e.g. an SFT stage that died before its end, under the old layout
    assert main(["eval", "--run-dir", str(run)]) == 2
    assert "missing or unfinished" in capsys.readouterr().err


def test_an_sft_model_replaced_after_the_stage_is_refused(sft_run, tmp_path, capsys):
    """The SFT result is re-hashed when used, not trusted by the fingerprint it recorded."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    weights = run / "sft" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")  # e.g. the base model's weights copied over it
    with pytest.raises(ValueError, match="is not what the SFT stage wrote"):
        sft_result.find_sft_checkpoint(_config(run))
    assert main(["eval", "--run-dir", str(run)]) == 2
    assert "is not what the SFT stage wrote" in capsys.readouterr().err


def test_resuming_on_another_sft_checkpoint_is_refused(sft_run, tmp_path):
    import shutil

    run, other = tmp_path / "run", tmp_path / "other"
    shutil.copytree(sft_run / "sft" / "model", tmp_path / "start")
    shutil.copytree(sft_run / "sft" / "model", other)
    (other / "config.json").write_text((other / "config.json").read_text() + " ")  # any other model
    start = _config(run, f"sft.checkpoint={tmp_path / 'start'}")
    ckpt = _checkpoint(run, sft_result.start_fingerprint(start))
    build.refuse_other_sft(start, ckpt)  # the model it started from: accepted
    with pytest.raises(ConfigError, match="trained from another SFT model than sft.checkpoint"):
        build.refuse_other_sft(_config(run, f"sft.checkpoint={other}"), ckpt)


def test_sft_checkpoint_may_name_another_runs_finished_sft_stage(sft_run, tmp_path):
    """``sft.checkpoint=<run>/sft`` starts from the model that stage wrote; a model dir is used as it is."""
    other = tmp_path / "other"
    stage = sft_run / "sft"
    assert sft_result.find_sft_checkpoint(_config(other, f"sft.checkpoint={stage}")) == stage / "model"
    assert sft_result.find_sft_checkpoint(_config(other, f"sft.checkpoint={stage / 'model'}")) == stage / "model"

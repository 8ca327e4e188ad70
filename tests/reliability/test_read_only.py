"""A run dir (or output) that cannot be written is one line and exit 2, before the command's expensive work."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reliability_helpers import make_read_only, write_fake_checkpoint  # noqa: E402
from test_report import make_run  # noqa: E402

from runners import atomic  # noqa: E402
from runners.cli import main  # noqa: E402
from runners.config import apply_overrides, to_dict  # noqa: E402
from runners.config.presets import get_preset  # noqa: E402
from runners.train.checkpoint import CheckpointManager  # noqa: E402


def _eval_run(tmp_path: Path) -> Path:
    """A run dir with a config and one (meaningless) checkpoint on a model outside it."""
    run, model = tmp_path / "run", tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    config = apply_overrides(
        get_preset("cpu-tiny"), [f"run_dir={run}", f"model.path={model}", "sft.enabled=never", "maze.heldout_sets=[]"]
    )
    run.mkdir()
    (run / "config.json").write_text(json.dumps(to_dict(config)))
    manager = CheckpointManager(run / "checkpoints", log=lambda m: None)
    manager.start_run("none")
    manager.save(1, write_fake_checkpoint)
    return run


def _one_line(err: str, where: Path) -> None:
    assert f"cannot write {where}" in err or f"cannot write the run dir {where}" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_eval_refuses_before_it_builds_or_evaluates_anything(tmp_path, monkeypatch, capsys):
    import runners.build as build
    import runners.rollout.generation.adapters as adapters
    import runners.train.steps as steps

    run = _eval_run(tmp_path)
    work: list[str] = []
    monkeypatch.setattr(adapters, "check_adapter", lambda *a, **k: None)  # the checkpoint's files are placeholders
    monkeypatch.setattr(build, "build_generator", lambda *a, **k: work.append("build"))
    monkeypatch.setattr(steps, "eval_step", lambda *a, **k: work.append("eval"))
    make_read_only(run, monkeypatch)
    assert main(["eval", "--run-dir", str(run)]) == 2
    _one_line(capsys.readouterr().err, run / "eval" / "eval.json")
    assert not work


def test_report_refuses_before_it_draws_the_replays(tmp_path, monkeypatch, capsys):
    import runners.artifacts.report as report

    run = make_run(tmp_path / "run")
    drawn: list[int] = []
    monkeypatch.setattr(report, "render_html", lambda data, replays: drawn.append(replays) or "")
    make_read_only(run, monkeypatch)
    assert main(["report", str(run)]) == 2
    _one_line(capsys.readouterr().err, run / "report.html")
    assert not drawn


@pytest.mark.parametrize("command", [["train", "logging.calibration_seconds=0"], ["sft", "--no-eval"]])
def test_train_and_sft_refuse_a_read_only_run_dir(tmp_path, monkeypatch, capsys, command):
    run = tmp_path / "run"
    run.mkdir()
    make_read_only(run, monkeypatch)
    assert main([command[0], "--preset", "cpu-tiny", "--run-dir", str(run), *command[1:]]) == 2
    _one_line(capsys.readouterr().err, run.resolve())
    assert list(run.iterdir()) == []


def test_check_writable_probes_the_nearest_existing_directory_and_leaves_nothing(tmp_path, monkeypatch):
    atomic.check_writable(tmp_path / "not" / "yet" / "out.json")
    assert list(tmp_path.iterdir()) == []
    make_read_only(tmp_path, monkeypatch)
    with pytest.raises(atomic.NotWritable, match="is not writable"):
        atomic.check_writable(tmp_path / "not" / "yet" / "out.json")

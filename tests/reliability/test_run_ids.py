"""Checkpoints belong to a run: selection follows `latest`, pruning spares other runs, fresh starts refuse to mix."""

from __future__ import annotations

import pytest

from reliability_helpers import write_fake_checkpoint
from runners.train.checkpoint import LATEST, CheckpointManager, run_id_of


def _save(manager: CheckpointManager, step: int):
    return manager.save(step, write_fake_checkpoint)


def _old_run(root):
    old = CheckpointManager(root, keep=2, log=lambda m: None)
    assert old.start_run("none") is None
    for step in (10, 12):
        _save(old, step)
    return old


def test_every_checkpoint_records_its_run(tmp_path):
    manager = CheckpointManager(tmp_path, log=lambda m: None)
    manager.start_run("none")
    path = _save(manager, 1)
    assert run_id_of(path) == manager.run_id
    assert (tmp_path / LATEST).read_text().splitlines() == ["step_000001", manager.run_id]


def test_fresh_start_refuses_a_dir_with_another_runs_checkpoints(tmp_path):
    _old_run(tmp_path)
    new = CheckpointManager(tmp_path, keep=2, log=lambda m: None)
    with pytest.raises(ValueError, match="earlier run.*step_000010, step_000012.*--resume latest"):
        new.start_run("none")


def test_pruning_never_deletes_another_runs_checkpoints_and_latest_wins(tmp_path):
    old = _old_run(tmp_path)
    new = CheckpointManager(tmp_path, keep=2, log=lambda m: None, run_id="new-run")  # e.g. resumed from elsewhere
    first = _save(new, 1)
    assert first.is_dir(), "the new run's checkpoint was pruned right after it was written"
    assert sorted(p.name for _, p in new.list()) == ["step_000001", "step_000010", "step_000012"]
    reader = CheckpointManager(tmp_path, log=lambda m: None)  # what eval and export use
    assert reader.resolve("latest") == first
    for step in (2, 3):
        _save(new, step)
    assert sorted(p.name for _, p in new.list()) == ["step_000002", "step_000003", "step_000010", "step_000012"]
    assert {run_id_of(p) for _, p in new.list() if p.name > "step_000009"} == {old.run_id}


def test_a_marker_naming_a_missing_checkpoint_never_falls_back_to_another_run(tmp_path):
    messages = []
    _old_run(tmp_path)
    new = CheckpointManager(tmp_path, keep=2, log=messages.append, run_id="new-run")
    first = _save(new, 1)
    import shutil

    shutil.rmtree(first)
    assert CheckpointManager(tmp_path, log=messages.append).latest_valid() is None
    assert any("from another run, skipped" in m for m in messages)


def test_resume_continues_the_same_run(tmp_path):
    old = _old_run(tmp_path)
    again = CheckpointManager(tmp_path, keep=2, log=lambda m: None)
    assert again.start_run("auto").name == "step_000012"
    assert again.run_id == old.run_id
    _save(again, 13)
    assert [p.name for _, p in again.list()] == ["step_000012", "step_000013"]


def test_resave_of_an_existing_step_replaces_it(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3, log=lambda m: None)
    manager.start_run("none")
    manager.save(1, lambda tmp: write_fake_checkpoint(tmp, {"state.json": b'{"v": 1}'}))
    path = manager.save(1, lambda tmp: write_fake_checkpoint(tmp, {"state.json": b'{"v": 2}'}))
    assert (path / "state.json").read_bytes() == b'{"v": 2}'
    assert manager.latest_valid() == path
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

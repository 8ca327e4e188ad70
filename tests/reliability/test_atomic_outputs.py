"""Outputs a later command reads are replaced atomically; export never deletes a foreign directory's files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runners import atomic
from runners.config import apply_overrides
from runners.rollout.evaluate import write_json
from runners.train.loop import LoopState, finish_run
from runners.config.presets import get_preset


def test_write_json_goes_through_a_fsynced_temp_file_and_a_rename(tmp_path, monkeypatch):
    replaced, synced = [], []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(os, "replace", lambda a, b: replaced.append((Path(a), Path(b))) or real_replace(a, b))
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    target = tmp_path / "eval_results.json"
    write_json(target, {"solve_rate": 0.5})
    assert json.loads(target.read_text()) == {"solve_rate": 0.5}
    assert replaced and replaced[-1][1] == target and replaced[-1][0].parent == tmp_path and synced
    assert [p.name for p in tmp_path.iterdir()] == ["eval_results.json"]


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    target = tmp_path / "config.json"
    atomic.write_json(target, {"v": 1})

    def boom(a, b):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        atomic.write_json(target, {"v": 2})
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


class _Backend:
    """A step backend whose adapter write can fail half-way, like a kill during the final save."""

    def __init__(self, payload: bytes, fail: bool = False):
        self.payload, self.fail = payload, fail

    def save_adapter(self, directory: Path) -> None:
        (directory / "adapter_config.json").write_text("{}")
        if self.fail:
            raise KeyboardInterrupt("killed while writing the final adapter")
        (directory / "adapter_model.safetensors").write_bytes(self.payload)

    def evaluate(self, name):
        return {
            "solve_rate": 0.0,
            "solved": 0,
            "episodes": 64,
            "spl": 0.0,
            "invalid_action_rate": 0.0,
            "mean_moves": 0.0,
        }

    def results_extras(self):
        return {}, {}


class _Metrics:
    jsonl_path = "metrics.jsonl"


class _Manager:
    root = "checkpoints"


def test_final_adapter_is_never_left_empty(tmp_path):
    config = apply_overrides(get_preset("cpu-tiny"), ["maze.heldout_sets=[]"])
    after = _Backend(b"").evaluate("x")
    finish_run(config, _Backend(b"first"), LoopState(), after, 1, tmp_path, _Manager(), _Metrics(), 0.0)
    final = tmp_path / "final_adapter"
    assert (final / "adapter_model.safetensors").read_bytes() == b"first"
    with pytest.raises(KeyboardInterrupt):
        finish_run(config, _Backend(b"second", fail=True), LoopState(), after, 2, tmp_path, _Manager(), _Metrics(), 0.0)
    assert (final / "adapter_model.safetensors").read_bytes() == b"first"
    finish_run(config, _Backend(b"third"), LoopState(), after, 3, tmp_path, _Manager(), _Metrics(), 0.0)
    assert (final / "adapter_model.safetensors").read_bytes() == b"third"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_results.json", "final_adapter"]


def _run_with_adapter(tmp_path: Path):
    run = tmp_path / "run"
    (run / "base_model").mkdir(parents=True)
    (run / "base_model" / "config.json").write_text("{}")
    (run / "final_adapter").mkdir()
    (run / "final_adapter" / "adapter_config.json").write_text(json.dumps({"r": 4}))
    (run / "final_adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    return apply_overrides(get_preset("cpu-tiny"), [f"run_dir={run}", "sft.enabled=never"])


def test_export_refuses_a_non_empty_foreign_directory_unless_forced(tmp_path):
    from runners.artifacts.export import export

    config = _run_with_adapter(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="--force"):
        export(config, out_dir=str(out))
    assert (out / "notes.txt").read_text() == "precious"
    export(config, out_dir=str(out), force=True)
    assert not (out / "notes.txt").exists() and (out / "adapter" / "adapter_model.safetensors").is_file()


def test_re_export_replaces_an_earlier_export_and_names_final_paths(tmp_path):
    from runners.artifacts.export import export

    config = _run_with_adapter(tmp_path)
    out = tmp_path / "exp"
    export(config, out_dir=str(out))
    export(config, out_dir=str(out))  # an earlier export may be replaced without --force
    meta = json.loads((out / "export.json").read_text())
    assert meta["adapter"] == str((out / "adapter").resolve())
    adapter_cfg = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter_cfg["base_model_name_or_path"] == str((out / "base_model").resolve())
    assert ".tmp" not in (out / "SERVING.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp", "run"]


def test_cli_export_reports_the_refusal(tmp_path, capsys):
    from runners.cli import main

    config = _run_with_adapter(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    assert main(["export", "--run-dir", config.run_dir, "sft.enabled=never", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert (out / "notes.txt").is_file()


def test_atomic_files_and_dirs_get_the_permissions_plain_ones_would(tmp_path):
    """mkstemp/mkdtemp create owner-only entries; what a user reads (reports, results, adapters) must not be."""
    old = os.umask(0o022)
    try:
        atomic.write_text(tmp_path / "report.html", "<html></html>")
        staged = atomic.temp_dir_beside(tmp_path / "final_adapter")
        (tmp_path / "plain.txt").write_text("x")
        (tmp_path / "plain_dir").mkdir()
    finally:
        os.umask(old)
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == (tmp_path / "plain.txt").stat().st_mode & 0o777 == 0o644
    assert staged.stat().st_mode & 0o777 == (tmp_path / "plain_dir").stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("where", ["final_adapter", "base_model"])
@pytest.mark.parametrize("target", ["secret", "/dev/zero"])
def test_export_never_follows_a_link_out_of_the_run_dir(tmp_path, where, target):
    from runners.artifacts.export import export

    config = _run_with_adapter(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("aws_secret_access_key=abc")
    os.symlink(secret if target == "secret" else target, Path(config.run_dir) / where / "notes.bin")
    out = tmp_path / "exp"
    with pytest.raises(ValueError, match="notes.bin is a symbolic link"):
        export(config, out_dir=str(out))
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run", "secret"]


def test_copy_regular_tree_refuses_special_files_and_a_linked_root(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.txt").write_text("a")
    (src / "DONE").write_text("")
    assert atomic.copy_regular_tree(src, tmp_path / "copy", skip=("DONE",)) == 1
    assert sorted(str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*")) == ["sub", "sub/a.txt"]
    os.mkfifo(src / "pipe")
    with pytest.raises(ValueError, match="pipe is not a regular file"):
        atomic.copy_regular_tree(src, tmp_path / "copy2")
    os.symlink(src, tmp_path / "linked")
    with pytest.raises(ValueError, match="symbolic link"):
        atomic.copy_regular_tree(tmp_path / "linked", tmp_path / "copy3")
    with pytest.raises(ValueError, match="more than"):
        (src / "pipe").unlink()
        atomic.copy_regular_tree(src, tmp_path / "copy4", limit=0)


def test_export_of_a_checkpoint_copies_only_what_its_manifest_lists(tmp_path):
    from reliability_helpers import write_fake_checkpoint

    from runners.artifacts.export import export
    from runners.train.checkpoint import CheckpointManager

    config = _run_with_adapter(tmp_path)
    manager = CheckpointManager(Path(config.run_dir) / "checkpoints", log=lambda m: None)
    manager.start_run("none")
    ckpt = manager.save(1, write_fake_checkpoint)
    (ckpt / "adapter" / "planted.bin").write_bytes(b"added after the checkpoint was written")
    out = export(config, out_dir=str(tmp_path / "exp"))
    assert sorted(p.name for p in (out / "adapter").iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]


def test_temp_dirs_a_killed_process_left_are_removed_and_no_other(tmp_path):
    """A publish removes the ``.<name>.tmp.*`` / ``.old.*`` dirs of a dead process of this host, and keeps those of a
    live process, of another host and of unknown owner (older versions)."""
    import subprocess
    import sys

    final = tmp_path / "sft"
    host = atomic._owner_tag().rsplit("-", 1)[0]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [tmp_path / f".sft.tmp.{host}-{dead.pid}.abc", tmp_path / f".sft.old.{host}-{dead.pid}.def"]
    kept = [
        tmp_path / f".sft.tmp.{host}-{os.getpid()}.ghi",  # alive: this process
        tmp_path / f".sft.tmp.otherhost-{dead.pid}.jkl",  # another host of a shared filesystem
        tmp_path / ".sft.tmp.mno",  # no owner recorded
        tmp_path / f".export.tmp.{host}-{dead.pid}.pqr",  # beside another output
    ]
    for path in stale + kept:
        (path / "weights").mkdir(parents=True)
    new = atomic.temp_dir_beside(final)
    assert new.name.startswith(f".sft.tmp.{host}-{os.getpid()}.")
    assert not any(path.exists() for path in stale)
    assert all((path / "weights").is_dir() for path in kept)

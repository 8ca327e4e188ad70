"""Checkpoint manifests: the fixed file set is required, keys stay inside, malformed entries are 'broken, skipped'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import runners.train.checkpoint as ckpt
from reliability_helpers import write_fake_checkpoint
from runners.train.checkpoint import MANIFEST, REQUIRED_FILES, CheckpointManager, verify


def _save(manager: CheckpointManager, step: int, payload: bytes = b"w" * 64) -> Path:
    return manager.save(step, lambda tmp: write_fake_checkpoint(tmp, {"adapter/adapter_model.safetensors": payload}))


def _rewrite_manifest(path: Path, edit) -> None:
    manifest = json.loads((path / MANIFEST).read_text())
    (path / MANIFEST).write_text(json.dumps(edit(manifest)))


@pytest.mark.parametrize("rel", REQUIRED_FILES)
def test_a_required_file_dropped_from_the_manifest_is_broken(tmp_path, rel):
    messages = []
    manager = CheckpointManager(tmp_path, keep=5, log=messages.append)
    good = _save(manager, 1)
    bad = _save(manager, 2)
    (bad / rel).write_bytes(b"")  # emptied, and its manifest entry removed so sizes and hashes still "match"

    def drop(manifest):
        del manifest["files"][rel]
        return manifest

    _rewrite_manifest(bad, drop)
    assert rel in verify(bad)
    assert manager.latest_valid() == good
    assert any("step_000002" in m and "broken, skipped" in m and rel in m for m in messages), messages


@pytest.mark.parametrize("key", ["../../../../etc/hostname", "/etc/hostname", "adapter/../../outside", "a\\..\\b"])
def test_keys_outside_the_checkpoint_are_rejected_without_opening_them(tmp_path, key, monkeypatch):
    manager = CheckpointManager(tmp_path / "ckpts", log=lambda m: None)
    path = _save(manager, 1)
    (tmp_path / "outside").write_text("secret")
    opened = []
    real = ckpt.sha256_file
    monkeypatch.setattr(ckpt, "sha256_file", lambda p, *a: opened.append(Path(p)) or real(p, *a))

    def add(manifest):
        manifest["files"][key] = {"sha256": "0" * 64, "bytes": 6}
        return manifest

    _rewrite_manifest(path, add)
    problem = verify(path)
    assert problem is not None and "outside the checkpoint" in problem
    assert all(p.resolve().is_relative_to(path.resolve()) for p in opened)


def test_a_key_escaping_through_a_symlink_is_rejected(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpts", log=lambda m: None)
    path = _save(manager, 1)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("x")
    (path / "link").symlink_to(tmp_path / "elsewhere")

    def add(manifest):
        manifest["files"]["link/f"] = {"sha256": ckpt.sha256_file(tmp_path / "elsewhere" / "f"), "bytes": 1}
        return manifest

    _rewrite_manifest(path, add)
    assert "outside the checkpoint" in verify(path)


@pytest.mark.parametrize(
    "manifest",
    [
        {"state.json": 1},
        [],
        None,
        3,
        "text",
        {"files": []},
        {"files": None},
        {"files": {"state.json": 1}},
        {"files": {"state.json": None}},
        {"files": {"state.json": {"sha256": "0" * 64}}},
        {"files": {"state.json": {"bytes": 2}}},
        {"files": {"state.json": {"bytes": "2", "sha256": "0" * 64}}},
        {"files": {"state.json": {"bytes": True, "sha256": "0" * 64}}},
        {"files": {"state.json": {"bytes": -1, "sha256": "0" * 64}}},
        {"files": {"state.json": {"bytes": 2, "sha256": 5}}},
        {"files": {}, "run_id": 7},
    ],
)
def test_malformed_manifests_are_skipped_with_a_reason_not_a_traceback(tmp_path, manifest):
    messages = []
    manager = CheckpointManager(tmp_path, keep=5, log=messages.append)
    good = _save(manager, 1)
    bad = _save(manager, 2)
    (bad / MANIFEST).write_text(json.dumps(manifest))
    assert isinstance(verify(bad), str)
    assert manager.latest_valid() == good
    assert any("step_000002: broken, skipped: " in m for m in messages), messages


def test_unreadable_manifest_bytes_are_broken(tmp_path):
    manager = CheckpointManager(tmp_path, log=lambda m: None)
    path = _save(manager, 1)
    (path / MANIFEST).write_bytes(b"\xff\xfe{")
    assert "unreadable" in verify(path)
    assert manager.latest_valid() is None


def test_a_manifest_nested_too_deep_for_json_is_broken_not_a_traceback(tmp_path):
    messages = []
    manager = CheckpointManager(tmp_path, keep=5, log=messages.append)
    good = _save(manager, 1)
    bad = _save(manager, 2)
    (bad / MANIFEST).write_text('{"files": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "unreadable (RecursionError)" in verify(bad)
    assert manager.latest_valid() == good
    assert any("step_000002: broken, skipped: " in m for m in messages), messages


def test_a_key_naming_a_symlink_loop_is_broken_not_a_traceback(tmp_path):
    manager = CheckpointManager(tmp_path, log=lambda m: None)
    path = _save(manager, 1)
    (path / "loop").symlink_to(path / "loop")

    def add(manifest):
        manifest["files"]["loop/x"] = {"sha256": "0" * 64, "bytes": 1}
        return manifest

    _rewrite_manifest(path, add)
    assert isinstance(verify(path), str)
    assert manager.latest_valid() is None


def test_an_unreadable_file_is_broken_not_a_traceback(tmp_path, monkeypatch):
    messages = []
    manager = CheckpointManager(tmp_path, keep=5, log=messages.append)
    good = _save(manager, 1)
    _save(manager, 2)
    real = ckpt.sha256_file

    def eio(path, *args):
        if "step_000002" in str(path):
            raise OSError(5, "Input/output error")
        return real(path, *args)

    monkeypatch.setattr(ckpt, "sha256_file", eio)
    assert manager.latest_valid() == good
    assert any("step_000002: broken, skipped: " in m and "unreadable" in m for m in messages), messages

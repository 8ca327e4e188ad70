"""Checkpoint manager: atomic commit, manifest verification, keep-K, corruption detection, resume resolution."""

import hashlib
import json
from pathlib import Path

import pytest

from runners.train.checkpoint import (
    LATEST,
    MANIFEST,
    REQUIRED_FILES,
    CheckpointManager,
    sha256_file,
    step_dir_name,
    verify,
)


def _writer(payload: bytes):
    def write(tmp: Path) -> None:
        for rel in REQUIRED_FILES:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text("{}")
        (tmp / "weights.bin").write_bytes(payload)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "state.json").write_text(json.dumps({"len": len(payload)}))

    return write


def test_sha256_matches_known_digest(tmp_path):
    f = tmp_path / "abc"
    f.write_bytes(b"abc")
    # FIPS 180-2 test vector for "abc".
    assert sha256_file(f) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_save_writes_manifest_and_latest_marker(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=3, log=lambda m: None)
    path = mgr.save(7, _writer(b"x" * 100))
    assert path.name == step_dir_name(7) == "step_000007"
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["step"] == 7
    assert manifest["files"]["weights.bin"] == {"sha256": hashlib.sha256(b"x" * 100).hexdigest(), "bytes": 100}
    assert "sub/state.json" in manifest["files"]
    assert (tmp_path / LATEST).read_text().splitlines()[0] == "step_000007"
    assert verify(path) is None
    assert not list(tmp_path.glob(".step_*")), "temp dirs must be gone after commit"


def test_keep_last_k(tmp_path):
    mgr = CheckpointManager(tmp_path, keep=2, log=lambda m: None)
    for step in (1, 2, 3, 4):
        mgr.save(step, _writer(bytes([step]) * 10))
    assert [s for s, _ in mgr.list()] == [3, 4]
    assert mgr.latest_valid().name == "step_000004"


def test_truncated_file_is_skipped_with_message(tmp_path):
    messages = []
    mgr = CheckpointManager(tmp_path, keep=5, log=messages.append)
    mgr.save(1, _writer(b"a" * 64))
    newest = mgr.save(2, _writer(b"b" * 64))
    with open(newest / "weights.bin", "r+b") as fh:
        fh.truncate(10)
    assert "truncated" in verify(newest)
    assert mgr.latest_valid().name == "step_000001"
    assert len(messages) == 1 and "step_000002" in messages[0] and "weights.bin" in messages[0]


def test_edited_file_fails_sha_check(tmp_path):
    mgr = CheckpointManager(tmp_path, log=lambda m: None)
    path = mgr.save(1, _writer(b"a" * 64))
    (path / "weights.bin").write_bytes(b"c" * 64)  # same size, other bytes
    assert "sha256" in verify(path)
    assert mgr.latest_valid() is None


def test_partial_checkpoint_without_manifest_is_skipped(tmp_path):
    messages = []
    mgr = CheckpointManager(tmp_path, log=messages.append)
    mgr.save(1, _writer(b"a"))
    partial = tmp_path / "step_000005"  # e.g. copied by hand, never finished
    partial.mkdir()
    (partial / "weights.bin").write_bytes(b"zz")
    assert mgr.latest_valid().name == "step_000001"
    assert any("step_000005" in m and "manifest" in m for m in messages)


def test_checkpoint_newer_than_marker_is_used_when_valid(tmp_path):
    mgr = CheckpointManager(tmp_path, log=lambda m: None)
    mgr.save(1, _writer(b"a"))
    mgr.save(2, _writer(b"b"))
    (tmp_path / LATEST).write_text("step_000001\n")  # crash between rename and marker
    assert mgr.latest_valid().name == "step_000002"


def test_resolve_modes(tmp_path):
    mgr = CheckpointManager(tmp_path / "ckpts", log=lambda m: None)
    assert mgr.resolve("auto") is None  # nothing yet: fresh start
    path = mgr.save(3, _writer(b"a"))
    assert mgr.resolve("none") is None
    assert mgr.resolve("latest") == path
    assert mgr.resolve(str(path)) == path
    (path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="step_000003"):
        mgr.resolve(str(path))


@pytest.mark.parametrize("failure", ["ENOSPC", "torch"])
def test_a_full_disk_during_a_save_says_so_and_keeps_the_committed_checkpoint(tmp_path, failure):
    import errno
    import os

    from runners.train.checkpoint import CheckpointWriteError

    mgr = CheckpointManager(tmp_path, log=lambda m: None)
    mgr.save(1, _writer(b"a"))

    def full(tmp: Path) -> None:
        _writer(b"b")(tmp)
        if failure == "ENOSPC":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")  # torch.save's

    with pytest.raises(CheckpointWriteError, match="step_000002 .* step_000001, is intact.*--resume latest"):
        mgr.save(2, full)
    assert mgr.latest_valid().name == "step_000001"
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST, "step_000001"]

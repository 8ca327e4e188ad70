"""Broken storage under the adapter sync dir and the fixed eval sets: detected, named, never loaded.

The sync dir cases use the tiny text model and one real transformers generator: after every
failure the generator must still serve the last good adapter, tensor for tensor.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import mazegym.evalsets as evalsets
from lora_helpers import perturb_lora, tiny_lora_policy
from runners.train.sync import LATEST_FILE, AdapterSync, AdapterSyncError, version_dir_name
from runners.models.tiny import build_tiny_text_lm


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text")


@pytest.fixture(scope="module")
def policy(model_path):
    return tiny_lora_policy(model_path)


@pytest.fixture(scope="module")
def generator(model_path):
    from runners.rollout.generation.hf import HFGenerator

    return HFGenerator(model_path)


class Versions:
    """Version numbers that keep increasing across tests, since the generator is shared."""

    next = 1

    @classmethod
    def take(cls) -> int:
        cls.next += 1
        return cls.next - 1


def _served(generator) -> dict[str, torch.Tensor]:
    """The LoRA tensors the generator samples with."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(generator.model).items()}


def _assert_serves(generator, adapter_dir: Path, version: int) -> None:
    assert generator.adapter_version == version
    served, saved = _served(generator), load_file(str(adapter_dir / "adapter_model.safetensors"))
    assert served.keys() == saved.keys()
    assert all(torch.equal(served[k], saved[k]) for k in saved), (
        "the generator serves other weights than the good adapter"
    )


def _good_state(tmp_path, policy, generator) -> tuple[AdapterSync, int, Path]:
    """A sync dir whose latest adapter is good and loaded into the generator."""
    sync = AdapterSync(tmp_path / "sync", keep=3)
    version = Versions.take()
    perturb_lora(policy, version)
    path = sync.publish(policy, version)
    assert sync.pull(generator) == version
    return sync, version, path


def _leftovers(sync_dir: Path) -> list[str]:
    return sorted(p.name for p in sync_dir.iterdir() if p.name.startswith("."))


def _flip_tail(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-16:] = bytes(b ^ 0xFF for b in data[-16:])  # tensor data, not the header: still a valid file
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _edit_alpha(path: Path) -> None:
    config = json.loads(path.read_text())
    config["lora_alpha"] = config["lora_alpha"] * 2  # still valid JSON: would silently rescale the adapter
    path.write_text(json.dumps(config))


VERSION_DIR_DAMAGE = {
    "truncated weights": (
        lambda d: _truncate(d / "adapter_model.safetensors"),
        "adapter_model.safetensors has .* bytes.*truncated",
    ),
    "flipped weight bytes": (
        lambda d: _flip_tail(d / "adapter_model.safetensors"),
        "adapter_model.safetensors does not match its sha256",
    ),
    "edited config": (lambda d: _edit_alpha(d / "adapter_config.json"), "adapter_config.json (has|does not match)"),
    "missing weights": (lambda d: (d / "adapter_model.safetensors").unlink(), "adapter_model.safetensors is missing"),
    "missing manifest": (lambda d: (d / "manifest.json").unlink(), "no manifest.json"),
    "extra weights file": (
        lambda d: (d / "adapter_model.bin").write_bytes(b"\0" * 64),
        "unexpected file.*adapter_model.bin",
    ),
}


@pytest.mark.parametrize("damage", sorted(VERSION_DIR_DAMAGE))
def test_damaged_published_adapter_is_refused_and_the_next_publish_recovers(tmp_path, policy, generator, damage):
    """A published adapter whose files were truncated, altered, removed or added after publishing
    is refused by ``pull`` with the file and the reason; the generator keeps serving the previous
    adapter exactly, and the next good publish is loaded normally."""
    sync, good, good_dir = _good_state(tmp_path, policy, generator)
    broken = Versions.take()
    perturb_lora(policy, broken)
    broken_dir = sync.publish(policy, broken)
    corrupt, reason = VERSION_DIR_DAMAGE[damage]
    corrupt(broken_dir)

    with pytest.raises(
        AdapterSyncError, match=rf"version {broken} .* broken, not loaded .*keeps version {good}\): {reason}"
    ):
        sync.pull(generator)
    _assert_serves(generator, good_dir, good)
    with pytest.raises(AdapterSyncError, match=reason):
        sync.committed()

    recovered = Versions.take()
    perturb_lora(policy, recovered)
    path = sync.publish(policy, recovered)
    assert sync.pull(generator) == recovered
    _assert_serves(generator, path, recovered)


def _latest_missing(sync: AdapterSync, version: int) -> str:
    (sync.sync_dir / LATEST_FILE).write_text(f"{version}\n")
    return "the directory is missing"


def _latest_half_written(sync: AdapterSync, version: int) -> str:
    half = sync.sync_dir / version_dir_name(version)  # as a non-atomic copy would leave it
    half.mkdir()
    latest = sync.latest()[1]
    shutil.copy2(latest / "adapter_config.json", half / "adapter_config.json")
    (sync.sync_dir / LATEST_FILE).write_text(f"{version}\n")
    return "no manifest.json"


def _latest_garbage(sync: AdapterSync, version: int) -> str:
    (sync.sync_dir / LATEST_FILE).write_text("")  # a torn marker (on storage without atomic rename)
    return "corrupt .*LATEST"


@pytest.mark.parametrize(
    "case", [_latest_missing, _latest_half_written, _latest_garbage], ids=["missing", "half-written", "garbage"]
)
def test_latest_marker_naming_a_missing_or_half_written_version_is_refused(tmp_path, policy, generator, case):
    """``LATEST`` pointing at a version directory that does not exist or was never finished, or
    holding no version number, stops ``pull`` with a message; nothing is loaded."""
    sync, good, good_dir = _good_state(tmp_path, policy, generator)
    reason = case(sync, Versions.take())
    with pytest.raises(AdapterSyncError, match=reason):
        sync.pull(generator)
    _assert_serves(generator, good_dir, good)


def _fail_writes_in(sync_dir: Path, monkeypatch, err: int) -> None:
    """Make every file or directory creation inside ``sync_dir`` fail with ``err``."""
    real_mkdir, real_open = os.mkdir, os.open
    root = str(sync_dir.resolve())

    def inside(path) -> bool:
        return os.path.abspath(os.fspath(path)).startswith(root)

    def mkdir(path, *args, **kwargs):
        if inside(path):
            raise OSError(err, os.strerror(err), os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if inside(path) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(err, os.strerror(err), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_)


def test_read_only_sync_dir_fails_publish_with_a_message(tmp_path, policy, generator, monkeypatch):
    """Publishing into a read-only sync dir raises one error naming the dir and the cause; the
    previous version stays committed and loaded, and no temporary files are left."""
    sync, good, good_dir = _good_state(tmp_path, policy, generator)
    new = Versions.take()
    if os.geteuid() == 0:  # root ignores permission bits: simulate a read-only mount instead
        _fail_writes_in(sync.sync_dir, monkeypatch, errno.EROFS)
    else:
        sync.sync_dir.chmod(0o555)
    try:
        with pytest.raises(
            AdapterSyncError,
            match=rf"cannot publish adapter version {new} to .*sync: "
            rf"(Read-only file system|Permission denied).*version {good} stays published",
        ):
            sync.publish(policy, new)
    finally:
        monkeypatch.undo()
        sync.sync_dir.chmod(0o755)
    assert sync.committed() == (good, good_dir) and _leftovers(sync.sync_dir) == []
    assert sync.pull(generator) == good
    _assert_serves(generator, good_dir, good)


class HalfWriter:
    """A source that writes half the adapter weights, then hits a full disk."""

    def __init__(self, adapter_dir: Path):
        self.adapter_dir = adapter_dir

    def save_adapter(self, directory: Path) -> None:
        shutil.copy2(self.adapter_dir / "adapter_config.json", directory / "adapter_config.json")
        data = (self.adapter_dir / "adapter_model.safetensors").read_bytes()
        with open(directory / "adapter_model.safetensors", "wb") as fh:
            fh.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _fsync_full_disk(monkeypatch, name_part: str) -> None:
    """``os.fsync`` fails with ENOSPC for files whose name contains ``name_part`` (as on NFS, where
    a full disk often shows only when data is flushed)."""
    real = os.fsync

    def fsync(fd):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if name_part in os.path.basename(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("stage", ["weights write", "weights fsync", "manifest fsync", "LATEST fsync"])
def test_full_disk_during_publish_keeps_the_previous_version(tmp_path, policy, generator, monkeypatch, stage):
    """ENOSPC at any write of a publish (the weights, the manifest, the LATEST marker) raises one
    error saying so; LATEST still names the previous, intact version, no temporary file is left,
    and once space is back the same version publishes and loads."""
    sync, good, good_dir = _good_state(tmp_path, policy, generator)
    new = Versions.take()
    source = policy
    if stage == "weights write":
        source = HalfWriter(good_dir)
    else:
        _fsync_full_disk(
            monkeypatch,
            {"weights fsync": "adapter_model", "manifest fsync": "manifest", "LATEST fsync": ".LATEST."}[stage],
        )
    with pytest.raises(
        AdapterSyncError, match=rf"version {new} .*No space left on device.*version {good} stays published"
    ):
        sync.publish(source, new)
    monkeypatch.undo()

    assert sync.committed() == (good, good_dir)
    assert _leftovers(sync.sync_dir) == []
    assert sync.pull(generator) == good
    _assert_serves(generator, good_dir, good)

    perturb_lora(policy, new)
    path = sync.publish(policy, new)
    assert sync.pull(generator) == new
    _assert_serves(generator, path, new)


# ------------------------------------------------------------------ eval sets (files on disk)


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """The eval set files copied to a scratch dir that the loader reads instead."""
    copy = tmp_path / "data"
    shutil.copytree(evalsets.DATA_DIR, copy)
    monkeypatch.setattr(evalsets, "DATA_DIR", copy)
    evalsets._load.cache_clear()
    yield copy
    evalsets._load.cache_clear()
    evalsets.eval_maze_ids.cache_clear()


def _rewrite(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _flip_cell(data: dict) -> None:
    rows = data["mazes"][0]["rows"]
    rows[1] = rows[1][:2] + ("." if rows[1][2] == "#" else "#") + rows[1][3:]


def _consistent_tamper(data: dict) -> None:
    """Swap a maze for another solvable one and recompute every stored hash, as a changed generator
    plus ``--regenerate`` would: the file is self-consistent, only the pinned hash can tell."""
    from mazegym.evalsets import MazeStream

    other = next(MazeStream(size=data["mazes"][0]["size"], seed=99))
    data["mazes"][0] = other.to_dict()
    data["set_hash"] = evalsets.set_hash([evalsets.MazeSpec.from_dict(m) for m in data["mazes"]])


EVAL_DAMAGE = {
    "truncated": (lambda p: p.write_text(p.read_text()[:5000]), "broken eval set \\(JSONDecodeError"),
    "flipped cell": (lambda p: _rewrite(p, _flip_cell), "broken eval set .*maze_id mismatch"),
    "maze dropped": (lambda p: _rewrite(p, lambda d: d["mazes"].pop()), "hashes to .*, pinned f83ac93470e37021"),
    "consistent tamper": (
        lambda p: _rewrite(p, _consistent_tamper),
        "hashes to .*, pinned f83ac93470e37021: the file was edited or regenerated",
    ),
    "no mazes key": (lambda p: _rewrite(p, lambda d: d.pop("mazes")), "broken eval set \\(KeyError"),
}


@pytest.mark.parametrize("damage", sorted(EVAL_DAMAGE))
def test_tampered_eval_set_file_is_refused(data_copy, damage):
    """An eval set file that was truncated, edited, shortened or replaced by a self-consistent
    different set is refused with its path and a way to restore it; the intact file loads."""
    assert len(evalsets.load_eval_set("VisMaze-v0")) == 64
    evalsets._load.cache_clear()
    corrupt, reason = EVAL_DAMAGE[damage]
    path = data_copy / "eval_VisMaze-v0.json"
    corrupt(path)
    evalsets._load.cache_clear()  # the tamper itself may have loaded the sets
    with pytest.raises(ValueError, match=rf"eval_VisMaze-v0.json: .*{reason}.*git checkout mazegym/data"):
        evalsets.load_eval_set("VisMaze-v0")


def test_regeneration_writes_beside_the_set_and_renames_over_it(data_copy, monkeypatch, capsys):
    """``--regenerate`` never rewrites a set in place: the file is replaced by a rename (a new inode holding the
    same bytes, since the generators reproduce the pinned set), and a write that fails leaves the set whole."""
    path = data_copy / "eval_VisMaze-v0.json"
    before, inode = path.read_bytes(), path.stat().st_ino
    evalsets.main(["--regenerate", "--only", "VisMaze-v0"])
    assert path.read_bytes() == before and path.stat().st_ino != inode
    inode = path.stat().st_ino

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        evalsets.main(["--regenerate", "--only", "VisMaze-v0"])
    assert path.read_bytes() == before and path.stat().st_ino == inode
    assert not list(data_copy.glob(".*"))  # no temporary file left


def test_missing_eval_set_file_is_named(data_copy):
    """A deleted eval set file is a FileNotFoundError naming it, not an empty set."""
    (data_copy / "eval_heldout-7x7.json").unlink()
    with pytest.raises(FileNotFoundError, match="eval_heldout-7x7.json is missing"):
        evalsets.load_eval_set("heldout-7x7")

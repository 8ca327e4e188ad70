"""Small builders shared by the reliability tests (no model download, no training)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class FakeAdapterPolicy:
    """Stands in for a LoRA policy where only the checkpoint files matter."""

    def __init__(self, payload: bytes = b"adapter"):
        self.payload = payload
        self.loaded: list[Path] = []

    def save_adapter(self, directory: Path) -> Path:
        """Write the two PEFT adapter files."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "adapter_config.json").write_text(json.dumps({"r": 2}))
        (directory / "adapter_model.safetensors").write_bytes(self.payload)
        return directory

    def load_adapter(self, directory: Path) -> None:
        """Remember what was loaded."""
        self.loaded.append(Path(directory))


def net_algorithm(stepped: bool = True) -> Any:
    """A real GRPO algorithm over the small network policy, with optimizer moments when ``stepped``."""
    import torch

    import algos
    from algos.policies.net import MazeNetPolicy

    torch.manual_seed(0)
    algorithm = algos.make("grpo", MazeNetPolicy(grid_size=7, arch="cnn", hidden=4))
    if stepped:
        for param in algorithm.optimizer.param_groups[0]["params"]:
            param.grad = torch.ones_like(param)
        algorithm.optimizer.step()
        algorithm.scheduler.step()
    return algorithm


def write_fake_checkpoint(directory: Path, files: dict[str, bytes] | None = None) -> None:
    """Fill ``directory`` with a full set of (meaningless) checkpoint files."""
    from runners.train.checkpoint import REQUIRED_FILES

    for rel in REQUIRED_FILES:
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_bytes((files or {}).get(rel, b"{}"))


def make_read_only(directory: Path, monkeypatch: Any) -> None:
    """Make ``directory`` read-only for this process: ``chmod 555``, or, for root (who ignores permission bits),
    every file or directory creation inside it fails with ``EROFS`` as on a read-only mount."""
    import errno
    import os

    directory = Path(directory)
    if os.geteuid() != 0:
        directory.chmod(0o555)  # pytest's tmp_path cleanup restores write permission before removing it
        return
    real_mkdir, real_open = os.mkdir, os.open
    root = str(directory.resolve())

    def inside(path: Any) -> bool:
        return os.path.abspath(os.fspath(path)).startswith(root)

    def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if inside(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_mkdir(path, *args, **kwargs)

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if inside(path) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "open", open_)

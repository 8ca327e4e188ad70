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

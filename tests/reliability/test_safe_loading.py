"""Resuming never unpickles: a crafted trainer state cannot run code, RNG states are plain JSON."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from mazegym.evalsets import MazeStream
from reliability_helpers import FakeAdapterPolicy, net_algorithm
from runners.train.checkpoint import CheckpointManager, write_manifest
from runners.config import TrainConfig, to_dict
from runners.train.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state

ROOT = Path(__file__).resolve().parents[2]


class _Payload:
    """Pickles to a call of ``os.mkdir(marker)``: proof that loading ran code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (str(self.marker),)


def _checkpoint(tmp_path: Path) -> tuple[Path, MazeStream]:
    stream = MazeStream(size=7, seed=0)
    next(stream)
    manager = CheckpointManager(tmp_path / "checkpoints", log=lambda m: None)
    path = save_checkpoint(
        manager, 1, FakeAdapterPolicy(), net_algorithm(), stream.state_dict(), to_dict(TrainConfig()), None, {}
    )
    return path, stream


def test_crafted_trainer_state_does_not_run_code(tmp_path):
    path, stream = _checkpoint(tmp_path)
    marker = tmp_path / "pwned"
    torch.save({"optimizer": _Payload(marker)}, path / "trainer_state.pt")
    write_manifest(path, 1, json.loads((path / "manifest.json").read_text())["run_id"])  # an attacker can recompute it
    with pytest.raises(ValueError, match="never unpickles") as refused:
        load_checkpoint(path, FakeAdapterPolicy(), net_algorithm(stepped=False), MazeStream(size=7, seed=0))
    assert "weights_only=False" not in str(refused.value)  # never the hint to load it unsafely
    assert not marker.exists(), "loading a checkpoint executed code from trainer_state.pt"


def test_rng_state_is_json_and_restores_every_generator(tmp_path):
    path, _ = _checkpoint(tmp_path)
    assert not (path / "rng_state.pt").exists()
    saved = json.loads((path / "rng_state.json").read_text())
    set_rng_state(saved)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(json.loads(json.dumps(rng_state())))  # round trip through text
    state = rng_state()
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws
    set_rng_state(saved)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_checkpoint_round_trip_restores_optimizer_and_stream(tmp_path):
    path, stream = _checkpoint(tmp_path)
    algorithm = net_algorithm(stepped=False)
    restored = MazeStream(size=7, seed=0)
    state = load_checkpoint(path, FakeAdapterPolicy(), algorithm, restored)
    assert state["step"] == 1
    assert restored.state_dict() == stream.state_dict()
    original = net_algorithm().state_dict()["optimizer"]["state"]
    loaded = algorithm.state_dict()["optimizer"]["state"]
    assert original.keys() == loaded.keys()
    for key in original:
        assert torch.equal(original[key]["exp_avg"], loaded[key]["exp_avg"])


def test_no_code_loads_pickles_from_disk():
    pattern = re.compile(
        r"weights_only\s*=\s*False|pickle\.loads?\(|allow_pickle\s*=\s*True|yaml\.load\(|yaml\.unsafe_load"
    )
    offenders = []
    for package in ("mazegym", "algos", "runners", "scripts", "benchmarks", "examples", "tests"):
        for path in (ROOT / package).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line) and "pickle.loads(pickle.dumps(" not in line:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_a_real_lora_policy_checkpoint_round_trips_through_safe_loading(tmp_path, one_torch_thread):
    import algos
    from algos.policies.lm import LoRAConfig, LoRALMPolicy
    from runners.rollout.generation.adapters import check_adapter
    from runners.models.tiny import build_tiny_text_lm

    model = build_tiny_text_lm(
        tmp_path / "model",
        num_hidden_layers=1,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=1,
        num_key_value_heads=1,
    )

    def build():
        torch.manual_seed(0)
        policy = LoRALMPolicy.from_pretrained(model, lora=LoRAConfig(rank=2, alpha=4), dtype=torch.float32)
        return policy, algos.make("grpo", policy)

    policy, algorithm = build()
    for param in policy.trainable_parameters():
        param.grad = torch.full_like(param, 0.1)
    algorithm.optimizer.step()
    stream = MazeStream(size=7, seed=0)
    manager = CheckpointManager(tmp_path / "checkpoints", log=lambda m: None)
    path = save_checkpoint(manager, 3, policy, algorithm, stream.state_dict(), to_dict(TrainConfig()), None, {})
    check_adapter(model, path / "adapter")
    fresh_policy, fresh_algorithm = build()
    load_checkpoint(path, fresh_policy, fresh_algorithm, MazeStream(size=7, seed=0))
    for a, b in zip(policy.trainable_parameters(), fresh_policy.trainable_parameters()):
        assert torch.equal(a, b)
    saved = algorithm.state_dict()["optimizer"]["state"]
    assert all(
        torch.equal(saved[k]["exp_avg"], fresh_algorithm.state_dict()["optimizer"]["state"][k]["exp_avg"])
        for k in saved
    )

"""Adapter sync: atomic versioned publishing, monotonic versions, and that a sync changes sampling."""

import json
import os

import numpy as np
import pytest
import torch

from mazegym.maze import sample_maze
from runners.rollout.generation.base import Prompt, SamplingConfig
from runners.rollout.generation.hf import HFGenerator
from runners.rollout.collect import RolloutConfig, collect_groups
from runners.train.sync import AdapterSync
from runners.models.tiny import build_tiny_text_lm
from lora_helpers import perturb_lora, tiny_lora_policy


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text")


@pytest.fixture(scope="module")
def policy(model_path):
    return tiny_lora_policy(model_path)


def test_publish_is_versioned_atomic_and_pruned(tmp_path, policy):
    sync = AdapterSync(tmp_path / "sync", keep=2)
    assert sync.latest() is None
    for v in (1, 2, 5):
        path = sync.publish(policy, v)
        assert path.name == f"v{v:06d}"
        assert {"adapter_config.json", "adapter_model.safetensors"} <= set(os.listdir(path))
        assert sync.latest() == (v, path)
    assert sync.versions() == [2, 5]  # pruned to the newest two
    assert (tmp_path / "sync" / "LATEST").read_text().strip() == "5"
    assert not [p for p in os.listdir(tmp_path / "sync") if p.startswith(".")]  # no temp leftovers
    assert json.loads((path / "adapter_config.json").read_text())["r"] == 4
    assert sync.last_publish_ms > 0


@pytest.mark.parametrize("version", [5, 4, 0])
def test_versions_must_increase(tmp_path, policy, version):
    sync = AdapterSync(tmp_path)
    sync.publish(policy, 5)
    with pytest.raises(ValueError, match="increase|start at 1"):
        sync.publish(policy, version)


def test_publish_from_adapter_dir_and_reject_garbage(tmp_path, policy):
    src = policy.save_adapter(tmp_path / "src")
    sync = AdapterSync(tmp_path / "sync")
    assert (sync.publish(src, 1) / "adapter_model.safetensors").read_bytes() == (
        src / "adapter_model.safetensors"
    ).read_bytes()
    with pytest.raises(FileNotFoundError):
        sync.publish(tmp_path / "nothing", 2)
    with pytest.raises(TypeError):
        sync.publish(object(), 2)
    assert sync.latest()[0] == 1  # failed publishes commit nothing
    (tmp_path / "sync" / "LATEST").write_text("garbage")
    with pytest.raises(RuntimeError, match="corrupt"):
        sync.latest()


def test_failed_write_leaves_previous_version_committed(tmp_path, policy):
    class Exploding:
        def save_adapter(self, directory):
            (directory / "adapter_config.json").write_text("{")
            raise OSError("disk full")

    sync = AdapterSync(tmp_path)
    sync.publish(policy, 1)
    with pytest.raises(OSError):
        sync.publish(Exploding(), 2)
    assert sync.latest()[0] == 1 and sync.versions() == [1]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp")]


def test_sync_changes_what_the_generator_samples_and_stamps_versions(tmp_path, model_path, policy):
    gen = HFGenerator(model_path)
    sync = AdapterSync(tmp_path / "sync")
    prompt = Prompt(gen.encoder.encode([{"role": "user", "content": "Map:\n#A.G#\nmove?"}])[0])
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0)
    before = gen.generate([prompt], greedy)[0]

    perturb_lora(policy, seed=1)
    sync.publish(policy, 1)
    assert sync.pull(gen) == 1 and gen.adapter_version == 1
    after = gen.generate([prompt], greedy)[0]
    assert after.response_ids != before.response_ids
    assert sync.last_load_ms > 0
    # The generator now scores like the trainer.
    scored = gen.score(prompt.prompt_ids, after.response_ids)
    from algos.data import Turn

    with torch.no_grad():
        ref = policy.score_turns([Turn(prompt_ids=prompt.prompt_ids, response_ids=after.response_ids)]).logprobs[0]
    assert np.allclose(scored, ref.numpy(), atol=1e-4)

    # Second sync: in-place reload; rollouts carry the new version.
    perturb_lora(policy, seed=2)
    sync.publish(policy, 2)
    assert sync.pull(gen) == 2
    assert sync.pull(gen) == 2  # nothing newer: no reload
    config = RolloutConfig(group_size=2, max_moves=1, max_new_tokens=4)
    episodes = collect_groups(gen, [sample_maze(np.random.default_rng(0), 5)], config)
    assert {e.weights_version for e in episodes} == {2}
    second = gen.generate([prompt], greedy)[0]
    assert second.response_ids != after.response_ids


def test_a_full_disk_inside_safetensors_is_a_sync_error_and_keeps_the_published_version(tmp_path, policy):
    from safetensors import SafetensorError

    from runners.train.sync import AdapterSyncError

    class FullDisk:
        def save_adapter(self, directory):
            raise SafetensorError(
                "Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                'message: "No space left on device" })'
            )

    sync = AdapterSync(tmp_path)
    sync.publish(policy, 1)
    with pytest.raises(AdapterSyncError, match="No space left on device.*version 1 stays published"):
        sync.publish(FullDisk(), 2)
    assert sync.latest()[0] == 1 and sync.versions() == [1]

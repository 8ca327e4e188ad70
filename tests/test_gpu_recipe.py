"""What the Qwen-VL recipe on GPUs needs from the training side, checked on CPU: gradient checkpointing from the
config before FSDP shards the policy, micro-batches sized by tokens, the FSDP unused-gradient switch only where it
matters, and the trainer's cached CUDA blocks released before a colocated engine wakes up."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import algos
from algos.base import token_budget_parts
from algos.data import Episode, Turn


def _config(*overrides: str):
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    return apply_overrides(get_preset("cpu-tiny"), ["run_dir=unused", "runner.num_threads=1", *overrides])


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory) -> Path:
    from runners.models.tiny import build_tiny_text_lm

    return build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text")


# ----------------------------------------------------------------------------- gradient checkpointing
def test_gradient_checkpointing_setting_is_typed_and_off_by_default():
    from runners.config import ConfigError

    assert _config().model.gradient_checkpointing is False
    assert _config("model.gradient_checkpointing=true").model.gradient_checkpointing is True
    with pytest.raises(ConfigError, match="model.gradient_checkpointing"):
        _config("model.gradient_checkpointing=sometimes")


def test_gradient_checkpointing_reaches_the_policy_before_it_is_sharded(tiny_text):
    from runners import build

    seen = {}

    def shard(policy):  # where the Ray worker calls runners.distributed.fsdp.shard_policy
        seen["checkpointing"] = policy.model.get_base_model().is_gradient_checkpointing
        return policy

    for setting in (False, True):
        config = _config(f"model.gradient_checkpointing={str(setting).lower()}", "engine.name=hf")
        _, policy, _, _ = build.build_training(config, tiny_text, prepare_policy=shard)
        assert seen["checkpointing"] is setting
        assert policy.model.get_base_model().is_gradient_checkpointing is setting


def test_the_qwen3_vl_preset_checkpoints_and_sizes_micro_batches_by_tokens():
    from runners.config.presets import get_preset

    config = get_preset("qwen3-vl-8b-lora32")
    assert config.model.gradient_checkpointing is True
    assert config.algo.params["micro_batch_tokens"] > 0


# ----------------------------------------------------------------------------- micro-batches by tokens
def test_token_budget_parts_bound_padded_tokens_and_rows():
    rows = torch.arange(6)
    lengths = [100, 300, 50, 900, 200, 200]
    parts = token_budget_parts(rows, lengths, budget=600, max_rows=6)
    assert [p.tolist() for p in parts] == [[0, 1], [2], [3], [4, 5]]  # [2, 3] would pad 50 to 900
    for part in parts:
        if len(part) > 1:
            assert len(part) * max(lengths[i] for i in part.tolist()) <= 600
    assert [p.tolist() for p in token_budget_parts(rows, [1] * 6, budget=600, max_rows=4)] == [[0, 1, 2, 3], [4, 5]]


def _episodes(lengths: list[int]) -> list[Episode]:
    episodes = []
    for i, length in enumerate(lengths):
        turn = Turn(prompt_ids=list(range(1, length + 1)), response_ids=[1, 2], logprobs=[-1.0, -1.0])
        turn.reward = float(i % 2)
        episodes.append(Episode(turns=[turn], group_id=0))
    return episodes


class RecordingPolicy(nn.Module):
    """A policy that records the turns of each forward and scores responses with one weight."""

    has_value_head = False

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.batches: list[int] = []

    def trainable_parameters(self):
        return [self.w]

    def score_turns(self, turns, *, reference=False):
        from algos.policy import PolicyOutput

        self.batches.append(len(turns))
        length = max(len(t.response_ids) for t in turns)
        logprobs = (self.w * torch.ones(len(turns), length)) - 1.0
        return PolicyOutput(logprobs, torch.zeros(len(turns), length))


def test_algorithm_cuts_micro_batches_by_tokens_when_asked():
    lengths = [40, 40, 40, 40, 200, 200, 10, 10]
    by_rows, by_tokens = RecordingPolicy(), RecordingPolicy()
    algos.make("grpo", by_rows, lr=1e-2, micro_batch_size=4, seed=0).update(_episodes(lengths))
    algos.make("grpo", by_tokens, lr=1e-2, micro_batch_size=4, micro_batch_tokens=250, seed=0).update(
        _episodes(lengths)
    )
    assert by_rows.batches == [4, 4, 4, 4]  # old log-probs, then the update
    assert max(by_tokens.batches) <= 4 and len(by_tokens.batches) > len(by_rows.batches)
    assert torch.allclose(by_rows.w, by_tokens.w)  # the same gradient, accumulated differently


def test_micro_batch_tokens_must_not_be_negative():
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        algos.make("grpo", RecordingPolicy(), micro_batch_tokens=-1)


# ----------------------------------------------------------------------------- FSDP unused gradients
class Unit:
    """Stands in for an FSDP unit, with or without torch's unused-gradient switch."""

    def __init__(self, has_switch: bool):
        self.calls = []
        if has_switch:
            self.set_reduce_scatter_unused_params = lambda on, recurse: self.calls.append((on, recurse))


def _model(vision_trains: bool = False, saved_module: bool = False, critic: bool = False) -> nn.Module:
    """Parameter names as PEFT lays them out: LoRA on the language model, a frozen base, optional extras."""
    model = nn.Module()
    model.q_proj = nn.Module()
    model.q_proj.base_layer = nn.Linear(2, 2).requires_grad_(False)
    model.q_proj.lora_A = nn.Linear(2, 2)
    model.visual = nn.Linear(2, 2)
    model.visual.requires_grad_(vision_trains)
    if saved_module:
        model.head = nn.Module()
        model.head.modules_to_save = nn.Module()
        model.head.modules_to_save.default = nn.Linear(2, 2)
    if critic:
        model.value_head = nn.Linear(2, 1)
    return model


def test_fsdp_start_without_the_switch_is_quiet_when_every_pass_trains_every_parameter():
    from runners.distributed.fsdp import reduce_unused_gradients

    units = [Unit(has_switch=False), Unit(has_switch=False)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reduce_unused_gradients(units, _model(), ranks=4)  # a LoRA on the language model only
        reduce_unused_gradients(units, _model(vision_trains=True), ranks=1)


@pytest.mark.parametrize(
    "model",
    [_model(vision_trains=True), _model(saved_module=True), _model(critic=True)],
    ids=["vision", "saved", "critic"],
)
def test_fsdp_switch_is_required_and_set_when_a_pass_may_leave_parameters_unused(model):
    from runners.distributed.fsdp import reduce_unused_gradients

    with pytest.raises(RuntimeError, match="set_reduce_scatter_unused_params.*modules_to_save or a critic"):
        reduce_unused_gradients([Unit(has_switch=False)], model, ranks=2)
    units = [Unit(has_switch=True), Unit(has_switch=True)]
    reduce_unused_gradients(units, model, ranks=2)
    assert [u.calls for u in units] == [[(True, False)], [(True, False)]]


# ----------------------------------------------------------------------------- waking a colocated engine
def test_engine_wake_releases_the_trainers_cached_cuda_blocks_first(monkeypatch):
    pytest.importorskip("ray")
    from runners.distributed import ray_runner

    calls = []
    monkeypatch.setattr("gc.collect", lambda: calls.append("gc"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))

    class Engine:
        def wake_up(self):
            calls.append("wake_up")

    worker = ray_runner.RolloutTrainWorker.__new__(ray_runner.RolloutTrainWorker)
    worker.generator = type("Generator", (), {"llm": Engine()})()
    worker.config = _config("model.device=cuda")
    worker.ray_cfg = ray_runner.RayConfig(sleep_engine_during_update=True)
    worker._engine_wake()
    assert calls == ["gc", "empty_cache", "wake_up"]


# ----------------------------------------------------------------------------- parity failures on the Ray runner
def test_stale_weights_on_a_worker_reach_the_driver_as_themselves():
    ray = pytest.importorskip("ray")
    from runners.distributed.ray_runner import _stale_weights_named
    from runners.train.parity import StaleWeightsError

    wrapped = ray.exceptions.RayTaskError("load_published", "Traceback ...", StaleWeightsError("serves version 1"))
    with pytest.raises(StaleWeightsError, match="load_published on a worker: serves version 1") as err:
        with _stale_weights_named("load_published"):
            raise wrapped
    assert not isinstance(err.value, ray.exceptions.RayTaskError)
    other = ray.exceptions.RayTaskError("load_published", "Traceback ...", ValueError("other"))
    with pytest.raises(ray.exceptions.RayTaskError):
        with _stale_weights_named("load_published"):
            raise other


def test_sync_step_logs_the_parity_gap_above_calibration():
    from runners.train.steps import sync_step

    class Probe:
        def check(self, generator, policy, version):
            return {"version": version, "mean_abs": 0.3, "max_abs": 0.9, "excess": 0.1, "drift": 1.0}

    class Sync:
        def publish(self, policy, version):
            pass

        def pull(self, generator):
            generator.adapter_version = 5

    generator = type("Generator", (), {"adapter_version": 4})()
    out = sync_step(None, generator, Sync(), 5, Probe())
    assert out == {
        "sync/version": 5.0,
        "sync/parity_mean_abs": 0.3,
        "sync/parity_excess": 0.1,
        "sync/parity_drift": 1.0,
    }


# ----------------------------------------------------------------------------- serving a play's whole history
def _openai_request(frames: int) -> list[dict]:
    from runners.artifacts.serve import to_openai_messages

    frame = np.zeros((9, 9, 3), dtype=np.uint8)
    content = [{"type": "image", "image": frame} for _ in range(frames)] + [{"type": "text", "text": "go"}]
    return to_openai_messages([{"role": "user", "content": content}])


def test_serve_accepts_every_frame_a_full_history_play_shows_and_no_more():
    from runners.artifacts.serve import RequestError, ServedPolicy, from_openai_messages
    from runners.config.presets import get_preset

    config = get_preset("qwen3-vl-8b-lora32")  # history=full, 20 moves; VisMaze-Hard-v0 allows 30
    served = ServedPolicy(generator=None, config=config, label="test", model_dir=Path("unused"))
    assert served.max_images() == 31
    assert len(from_openai_messages(_openai_request(20), served.max_images())[0]["content"]) == 21
    assert len(from_openai_messages(_openai_request(31), served.max_images())[0]["content"]) == 32
    with pytest.raises(RequestError, match="more than 31 images"):
        from_openai_messages(_openai_request(32), served.max_images())


def test_image_limit_follows_the_history_setting():
    from runners.config.derived import max_images_per_prompt

    full = _config("rollout.history=full", "rollout.max_moves=40")
    assert max_images_per_prompt(full) == 41
    assert max_images_per_prompt(_config("rollout.history=last_k", "rollout.history_k=3")) == 4
    assert max_images_per_prompt(_config("rollout.history=none")) == 1

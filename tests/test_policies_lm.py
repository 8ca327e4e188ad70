"""LoRALMPolicy on tiny random Qwen2 / Qwen2-VL models built from configs (no downloads)."""

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

import algos  # noqa: E402
from algos.data import Episode, Turn  # noqa: E402
from algos.policies.lm import LoRAConfig, LoRALMPolicy  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_qwen2(seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=256,
    )
    return transformers.Qwen2ForCausalLM(config)


def tiny_qwen2_vl(seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.Qwen2VLConfig(
        text_config=dict(
            vocab_size=160,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=64,
            max_position_embeddings=512,
            rope_scaling={"type": "mrope", "mrope_section": [16, 8, 8]},
        ),
        vision_config=dict(
            depth=1,
            embed_dim=32,
            hidden_size=128,
            num_heads=2,
            mlp_ratio=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            in_channels=3,
        ),
        image_token_id=151,
        video_token_id=152,
        vision_start_token_id=150,
        vision_end_token_id=153,
    )
    return transformers.Qwen2VLForConditionalGeneration(config)


TURNS = [
    Turn(prompt_ids=[1, 2, 3], response_ids=[4, 5]),
    Turn(prompt_ids=[1, 2, 3, 7, 8], response_ids=[9, 10, 11]),
    Turn(prompt_ids=[6], response_ids=[7]),
]


def manual_logprobs(model, turn):
    ids = torch.tensor([turn.input_ids])
    logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)[0]
    p = len(turn.prompt_ids)
    return [logp[p + j - 1, tok].item() for j, tok in enumerate(turn.response_ids)]


def test_evaluate_matches_an_unpadded_forward_and_masks_padding():
    policy = LoRALMPolicy(tiny_qwen2(), LoRAConfig(rank=4, alpha=8), score_chunk=2)
    out = policy.score_turns(TURNS)
    assert out.logprobs.shape == (3, 3) and out.entropy.shape == (3, 3) and out.values is None
    assert out.mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
    with torch.no_grad():
        for i, turn in enumerate(TURNS):
            expected = manual_logprobs(policy.model, turn)
            assert out.logprobs[i, : len(expected)].tolist() == pytest.approx(expected, abs=1e-5)
    assert (out.logprobs * (1 - out.mask)).abs().sum() == 0


def test_lora_targets_only_language_linears():
    policy = LoRALMPolicy(tiny_qwen2(), LoRAConfig(rank=4, alpha=8))
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert not any("lm_head" in n or "embed" in n for n in names)
    wrapped = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_loss_decreases_and_only_the_adapter_changes():
    policy = LoRALMPolicy(tiny_qwen2(), LoRAConfig(rank=8, alpha=16), score_chunk=4)
    base = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" not in n}
    lora_before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" in n}
    episodes = []
    for g in range(2):
        for k, reward in enumerate((1.0, 0.0, 0.0, 1.0)):
            response = [10 + k, 20 + k, 30 + g]
            turn = Turn(prompt_ids=[1, 2, 3 + g], response_ids=response, reward=reward)
            episodes.append(Episode(turns=[turn], group_id=g))
    algo = algos.make("grpo", policy, lr=5e-3, epochs=1)
    objective = []
    for _ in range(6):  # fixed batch, old = current weights each update: loss = -sum(A * logp)/..
        turns = [ep.turns[0] for ep in episodes]
        with torch.no_grad():
            lp = policy.score_turns(turns).logprobs.sum(1)
        adv = algos.get("grpo").group_relative_advantages(algo, episodes, "grpo")
        objective.append(-(adv * lp).mean().item())
        algo.update(episodes)
    assert objective[-1] < objective[0] - 0.1, objective
    for n, p in policy.model.named_parameters():
        if "lora_" in n:
            continue
        assert torch.equal(p, base[n]), f"base weight {n} changed"
    assert any(not torch.equal(p, lora_before[n]) for n, p in policy.model.named_parameters() if "lora_" in n)


def test_reference_is_the_base_model_with_adapter_disabled():
    model = tiny_qwen2()
    with torch.no_grad():
        base_lp = [manual_logprobs(model, t) for t in TURNS]
    policy = LoRALMPolicy(model, LoRAConfig(rank=4, alpha=8))
    with torch.no_grad():  # make the adapter non-trivial
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    ref = policy.score_turns(TURNS, reference=True)
    cur = policy.score_turns(TURNS)
    assert not ref.logprobs.requires_grad
    for i, expected in enumerate(base_lp):
        assert ref.logprobs[i, : len(expected)].tolist() == pytest.approx(expected, abs=1e-5)
    assert (cur.logprobs - ref.logprobs).abs().max() > 1e-3


def test_save_and_load_adapter_round_trip(tmp_path):
    policy = LoRALMPolicy(tiny_qwen2(), LoRAConfig(rank=4, alpha=8))
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    path = policy.save_adapter(tmp_path / "adapter")
    assert (path / "adapter_config.json").is_file() and (path / "adapter_model.safetensors").is_file()
    expected = policy.score_turns(TURNS).logprobs.detach()
    fresh = LoRALMPolicy(tiny_qwen2(), LoRAConfig(rank=4, alpha=8))
    assert not torch.allclose(fresh.score_turns(TURNS).logprobs, expected)
    fresh.load_adapter(path)
    assert torch.allclose(fresh.score_turns(TURNS).logprobs, expected, atol=1e-6)
    other_rank = LoRALMPolicy(tiny_qwen2(), LoRAConfig(rank=2, alpha=4))
    with pytest.raises(ValueError, match="rank"):
        other_rank.load_adapter(path)
    with pytest.raises(FileNotFoundError):
        fresh.load_adapter(tmp_path / "missing")


def test_from_pretrained_loads_a_local_directory(tmp_path):
    tiny_qwen2().save_pretrained(tmp_path / "model")
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(64)}, unk_token="t0"))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0").save_pretrained(tmp_path / "model")
    policy = LoRALMPolicy.from_pretrained(tmp_path / "model", LoRAConfig(rank=4, alpha=8), dtype=torch.float32)
    assert policy.score_turns(TURNS).logprobs.shape == (3, 3)
    with pytest.raises(FileNotFoundError, match="config.json"):
        LoRALMPolicy.from_pretrained(tmp_path / "nowhere")


def test_vlm_turns_never_put_lora_on_the_vision_tower_and_batch_consistently():
    from transformers.models.qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=56 * 56 * 4)
    policy = LoRALMPolicy(tiny_qwen2_vl(), LoRAConfig(rank=4, alpha=8), image_processor=processor, pad_token_id=0)
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and not any("visual" in n for n in names)
    rng = np.random.default_rng(0)
    images = [(rng.random((56, 56, 3)) * 255).astype(np.uint8) for _ in range(2)]
    k = policy.image_token_count(images[0])
    assert k == (56 // 14) ** 2 // 4

    def prompt(extra):
        return [1, 2, 150] + [151] * k + [153] + extra

    turns = [
        Turn(prompt_ids=prompt([5]), response_ids=[7, 8], images=[images[0]]),
        Turn(prompt_ids=prompt([5, 9, 9]), response_ids=[10], images=[images[1]]),
    ]
    batched = policy.score_turns(turns)
    alone = [policy.score_turns([t]) for t in turns]
    assert torch.allclose(batched.logprobs[0, :2], alone[0].logprobs[0], atol=1e-5)
    assert torch.allclose(batched.logprobs[1, :1], alone[1].logprobs[0], atol=1e-5)
    swapped = policy.score_turns([Turn(prompt_ids=turns[0].prompt_ids, response_ids=[7, 8], images=[images[1]])])
    assert not torch.allclose(swapped.logprobs, alone[0].logprobs), "the image must influence the scores"
    loss = -batched.logprobs.sum()
    loss.backward()
    assert all(p.grad is not None for n, p in policy.model.named_parameters() if p.requires_grad and "lora_B" in n)

"""The tiny-model factory: tokenizer, chat template, HF layout, idempotence, loadability."""

import json
import os

import numpy as np
import pytest
import torch

from runners.models.tiny import ACTION_TOKENS, build_tiny_qwen3_vl, build_tiny_text_lm, build_tiny_vlm, build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def text_lm(tmp_path_factory):
    return build_tiny_text_lm(tmp_path_factory.mktemp("models") / "text")


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    return build_tiny_vlm(tmp_path_factory.mktemp("models") / "vlm")


@pytest.mark.parametrize("text", ["#########\n#A..#.G.#\n", "Moved up. 19 moves left!", "é ü 漢字 \x00\x7f", ""])
def test_tokenizer_round_trips_any_text(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_action_words_are_single_tokens(tokenizer):
    for word in ACTION_TOKENS:
        assert len(tokenizer.encode(word, add_special_tokens=False)) == 1, word
    ids = tokenizer.encode("<action>left</action>", add_special_tokens=False)
    assert len(ids) == 3
    # A byte-level vocabulary: one token per byte elsewhere.
    assert len(tokenizer.encode("#.A", add_special_tokens=False)) == 3


def test_chat_template_is_chatml_with_image_placeholder(tokenizer):
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "image", "image": np.zeros((2, 2, 3))}, {"type": "text", "text": "map"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "<action>up</action>"}]},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>map<|im_end|>\n"
        "<|im_start|>assistant\n<action>up</action><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # Special tokens vanish from decoded replies.
    ids = tokenizer.encode("<action>up</action><|im_end|>", add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<action>up</action>"


def test_text_lm_has_standard_layout_and_is_idempotent(text_lm):
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert (text_lm / name).is_file(), name
    config = json.loads((text_lm / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # vLLM CPU needs head_dim 64
    mtime = os.path.getmtime(text_lm / "model.safetensors")
    assert build_tiny_text_lm(text_lm) == text_lm
    assert os.path.getmtime(text_lm / "model.safetensors") == mtime  # reused, not rebuilt


def test_changed_config_rebuilds(tmp_path):
    path = build_tiny_text_lm(tmp_path / "m")
    build_tiny_text_lm(path, num_hidden_layers=1)
    assert json.loads((path / "config.json").read_text())["num_hidden_layers"] == 1


def test_head_dim_other_than_64_fails_fast(tmp_path):
    with pytest.raises(ValueError, match="64"):
        build_tiny_text_lm(tmp_path / "bad", num_attention_heads=8)


def test_text_lm_loads_with_transformers_and_peft(text_lm):
    import peft
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(text_lm)
    model = AutoModelForCausalLM.from_pretrained(text_lm, dtype=torch.float32)
    assert model.config.vocab_size == len(tok)
    ids = torch.tensor([tok.encode("<|im_start|>user\nhi", add_special_tokens=False)])
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tok))
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert lora.num_parameters(only_trainable=True) > 0


def test_seed_controls_weights(tmp_path):
    from safetensors.torch import load_file

    a = load_file(str(build_tiny_text_lm(tmp_path / "a", seed=1) / "model.safetensors"))
    b = load_file(str(build_tiny_text_lm(tmp_path / "b", seed=1) / "model.safetensors"))
    c = load_file(str(build_tiny_text_lm(tmp_path / "c", seed=2) / "model.safetensors"))
    key = next(k for k in a if "q_proj.weight" in k)
    assert torch.equal(a[key], b[key]) and not torch.equal(a[key], c[key])


def test_vlm_runs_forward_with_pixels(vlm):
    from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(vlm)
    proc = AutoImageProcessor.from_pretrained(vlm)
    model = AutoModelForImageTextToText.from_pretrained(vlm, dtype=torch.float32)
    pix = proc(images=[np.full((225, 225, 3), 200, np.uint8)], return_tensors="pt")
    n_tokens = int(pix["image_grid_thw"][0].prod()) // proc.merge_size**2
    assert n_tokens == 16  # 225 px -> 112 px cap -> 8x8 patches -> 2x2 merge
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    ids = tok.encode("<|im_start|>user\n<|vision_start|>", add_special_tokens=False) + [pad] * n_tokens
    ids += tok.encode("<|vision_end|>map<|im_end|>", add_special_tokens=False)
    input_ids = torch.tensor([ids])
    out = model(
        input_ids=input_ids,
        pixel_values=pix["pixel_values"],
        image_grid_thw=pix["image_grid_thw"],
        mm_token_type_ids=(input_ids == pad).int(),
    )
    assert out.logits.shape == (1, len(ids), len(tok))
    assert torch.isfinite(out.logits).all()


def test_tiny_qwen3_vl_has_the_8b_layout_and_plays_image_turns(tmp_path):
    """The Qwen3-VL-shaped tiny model (GQA, interleaved M-RoPE, 16 px patches, DeepStack) loads and plays in bf16."""
    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.collect import RolloutConfig, collect_groups
    from mazegym.evalsets import load_eval_set

    path = build_tiny_qwen3_vl(tmp_path / "qwen3_vl")
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen3_vl" and config["vision_config"]["patch_size"] == 16
    assert config["text_config"]["num_key_value_heads"] < config["text_config"]["num_attention_heads"]
    gen = HFGenerator(path, dtype="bfloat16")
    assert (
        gen.encoder.image_token_count(np.zeros((225, 225, 3), np.uint8)) == 49
    )  # 224 px -> 14x14 patches -> 2x2 merge
    episodes = collect_groups(
        gen,
        load_eval_set("VisMaze-v0")[:1],
        RolloutConfig(group_size=2, max_moves=2, max_new_tokens=4, obs_mode="image", history="full"),
        seed=0,
    )
    turn = episodes[0].turns[-1]
    assert len(turn.images) == len(episodes[0].turns) and len(turn.logprobs) == len(turn.response_ids)

"""HF generation backend and prompt encoding: shapes, log-probs vs a fresh trainer forward, images."""

import numpy as np
import pytest
import torch

from algos.data import Turn
from mazegym.envs.vismaze import VisMazeEnv
from mazegym.llm import build_messages, system_prompt, user_message
from runners.rollout.generation.base import Generator, Prompt, SamplingConfig
from runners.rollout.generation.hf import HFGenerator
from runners.rollout.generation.prompts import ChatEncoder
from runners.models.tiny import build_tiny_text_lm, build_tiny_vlm

TOL_FP32 = 1e-4
"""Stated tolerance: generator sampling log-probs vs trainer forward, both fp32 (observed ~1e-6)."""


@pytest.fixture(scope="module")
def text_gen(tmp_path_factory):
    return HFGenerator(build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text"))


@pytest.fixture(scope="module")
def vlm_gen(tmp_path_factory):
    return HFGenerator(build_tiny_vlm(tmp_path_factory.mktemp("m") / "vlm"))


@pytest.fixture(scope="module")
def text_policy(text_gen):
    from algos.policies.lm import LoRALMPolicy, LoRAConfig

    return LoRALMPolicy.from_pretrained(text_gen.model_path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)


def _conversation(obs_mode: str, turns: int, history: str = "full", k: int = 2):
    """A real multi-turn maze conversation with canned replies; returns the messages of every turn."""
    env = VisMazeEnv(size=7, max_moves=10, obs_mode=obs_mode)
    obs, info = env.reset(seed=3)
    system = system_prompt(7, 10, obs_mode)
    history_pairs, per_turn = [], []
    for t in range(turns):
        user = user_message(obs, info, obs_mode=obs_mode)
        per_turn.append(build_messages(system, history_pairs, user, history, k))
        reply = ["<action>down</action>", "hmm, right", "", "<action>left</action>"][t % 4]
        history_pairs.append((user, reply))
        obs, _, _, _, info = env.step(t % 4)
        obs = {k2: (np.array(v, copy=True) if k2 == "image" else v) for k2, v in obs.items()}
    return per_turn


def test_hf_generator_satisfies_protocol(text_gen):
    assert isinstance(text_gen, Generator)
    assert text_gen.adapter_version == 0


@pytest.mark.parametrize("history", ["full", "last_k", "none"])
def test_memoised_encoding_equals_full_tokenisation(text_gen, history):
    encoder = ChatEncoder(text_gen.tokenizer)
    for messages in _conversation("text", 5, history):
        ids, images = encoder.encode(messages)
        full = text_gen.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ids == text_gen.tokenizer.encode(full, add_special_tokens=False)
        assert images == []
    assert encoder.segment_ok
    if history == "full":
        # The system prompt and earlier turns come from the memo: fewer segments than turns x messages.
        assert len(encoder.memo) < sum(len(m) for m in _conversation("text", 5, history))


def test_image_placeholders_expand_to_vision_token_count(vlm_gen):
    encoder = vlm_gen.encoder
    messages = _conversation("image", 3)[-1]  # full history: 3 images
    ids, images = encoder.encode(messages)
    assert len(images) == 3
    grid = vlm_gen.image_processor(images=images, return_tensors="pt")["image_grid_thw"]
    expected = int(grid.prod(-1).sum()) // vlm_gen.image_processor.merge_size**2
    assert sum(t == vlm_gen.image_token_id for t in ids) == expected == 3 * 16


def test_batched_generation_is_well_formed(text_gen):
    encoder = text_gen.encoder
    prompts = [Prompt(encoder.encode(m)[0]) for m in _conversation("text", 3)]  # different lengths
    results = text_gen.generate(prompts, SamplingConfig(max_new_tokens=12, temperature=1.0, seed=0))
    assert len(results) == 3
    for r in results:
        assert 1 <= len(r.response_ids) <= 12
        assert len(r.logprobs) == len(r.response_ids)
        assert all(lp <= 0.0 for lp in r.logprobs)
        assert r.finish_reason in ("stop", "length")
        if r.finish_reason == "stop":
            assert r.response_ids[-1] in text_gen.eos_ids
            assert not any(t in text_gen.eos_ids for t in r.response_ids[:-1])
        else:
            assert len(r.response_ids) == 12
        assert r.text == text_gen.tokenizer.decode(r.response_ids, skip_special_tokens=True)


def test_seeded_sampling_repeats_and_greedy_is_argmax(text_gen):
    prompt = Prompt(text_gen.encoder.encode(_conversation("text", 1)[0])[0])
    a = text_gen.generate([prompt], SamplingConfig(max_new_tokens=8, temperature=1.0, seed=7))[0]
    b = text_gen.generate([prompt], SamplingConfig(max_new_tokens=8, temperature=1.0, seed=7))[0]
    assert a.response_ids == b.response_ids
    g = text_gen.generate([prompt], SamplingConfig(max_new_tokens=4, temperature=0.0))[0]
    with torch.no_grad():
        seq = torch.tensor([prompt.prompt_ids + g.response_ids])
        logits = text_gen.model(input_ids=seq).logits[0, len(prompt.prompt_ids) - 1 : -1]
    assert g.response_ids == logits.argmax(-1).tolist()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_logprobs_match_fresh_trainer_forward(text_gen, text_policy, temperature):
    """Recorded log-probs == the trainer's Policy.score_turns at the same temperature (left-padded vs unpadded)."""
    prompts = [Prompt(text_gen.encoder.encode(m)[0]) for m in _conversation("text", 3)]
    results = text_gen.generate(prompts, SamplingConfig(max_new_tokens=10, temperature=temperature, seed=1))
    turns = [Turn(prompt_ids=p.prompt_ids, response_ids=r.response_ids) for p, r in zip(prompts, results)]
    text_policy.temperature = temperature
    try:
        with torch.no_grad():
            out = text_policy.score_turns(turns)
    finally:
        text_policy.temperature = 1.0
    for i, r in enumerate(results):
        assert np.allclose(out.logprobs[i, : len(r.logprobs)].numpy(), r.logprobs, atol=TOL_FP32)
    if temperature != 1.0:  # and the T=1 scores would NOT match: the temperature matters
        with torch.no_grad():
            plain = text_policy.score_turns(turns)
        assert not np.allclose(
            plain.logprobs[0, : len(results[0].logprobs)].numpy(), results[0].logprobs, atol=TOL_FP32
        )


def test_sampling_uses_the_full_distribution_not_a_hidden_top_k(text_gen):
    """transformers' default top_k=50 must not sneak in: recorded log-probs assume the full softmax."""
    prompt = Prompt(text_gen.encoder.encode([{"role": "user", "content": "x"}])[0])
    results = text_gen.generate([prompt] * 8, SamplingConfig(max_new_tokens=16, temperature=1.0, seed=3))
    ranks = []
    for r in results:
        seq = torch.tensor([prompt.prompt_ids + r.response_ids])
        with torch.no_grad():
            logits = text_gen.model(input_ids=seq).logits[0, len(prompt.prompt_ids) - 1 : -1]
        chosen = logits.gather(-1, torch.tensor(r.response_ids)[:, None])
        ranks += (logits > chosen).sum(-1).tolist()
    # The random tiny model is near-uniform over ~270 tokens: many samples rank beyond 50.
    assert max(ranks) >= 50 and np.mean(np.array(ranks) >= 50) > 0.3


def test_score_is_teacher_forced_logprob(text_gen, text_policy):
    prompt_ids = text_gen.encoder.encode(_conversation("text", 1)[0])[0]
    response = text_gen.tokenizer.encode("<action>up</action><|im_end|>", add_special_tokens=False)
    scored = text_gen.score(prompt_ids, response)
    with torch.no_grad():
        ref = text_policy.score_turns([Turn(prompt_ids=prompt_ids, response_ids=response)]).logprobs[0]
    assert len(scored) == len(response) == 4
    assert np.allclose(scored, ref.numpy(), atol=TOL_FP32)


def test_vlm_generation_with_images_matches_forward(vlm_gen):
    encoder = vlm_gen.encoder
    prompts = [Prompt(*encoder.encode(m)) for m in _conversation("image", 2)]  # 1 and 2 images
    results = vlm_gen.generate(prompts, SamplingConfig(max_new_tokens=6, temperature=1.0, seed=0))
    for p, r in zip(prompts, results):
        assert len(r.logprobs) == len(r.response_ids) >= 1
        # Unpadded teacher-forced forward with the same pixels must give the same log-probs.
        assert np.allclose(vlm_gen.score(p.prompt_ids, r.response_ids, p.images), r.logprobs, atol=TOL_FP32)
    # The image matters: a blank frame changes the log-probs.
    blank = [np.zeros_like(im) for im in prompts[0].images]
    assert not np.allclose(
        vlm_gen.score(prompts[0].prompt_ids, results[0].response_ids, blank), results[0].logprobs, atol=1e-6
    )


def test_bad_sampling_config_fails_fast(text_gen):
    with pytest.raises(ValueError, match="temperature"):
        text_gen.generate([Prompt([1, 2])], SamplingConfig(temperature=-1))
    with pytest.raises(ValueError, match="max_new_tokens"):
        text_gen.generate([Prompt([1, 2])], SamplingConfig(max_new_tokens=0))


@pytest.mark.parametrize("which", ["text", "vlm"])
def test_score_replies_equals_each_reply_scored_alone(which, text_gen, vlm_gen):
    gen = text_gen if which == "text" else vlm_gen
    obs_mode = "text" if which == "text" else "image"
    encoder = gen.encoder
    prompts = [Prompt(*encoder.encode(m)) for m in _conversation(obs_mode, 2)]  # two lengths: padding is exercised
    assert len({len(p.prompt_ids) for p in prompts}) == 2
    replies = [
        gen.tokenizer.encode(t, add_special_tokens=False)
        for t in ("<action>up</action><|im_end|>", "<action>left</action>", "x")
    ]
    batched = gen.score_replies(prompts, replies, temperature=1.0, max_prompts=1)
    assert np.allclose(batched, gen.score_replies(prompts, replies), atol=TOL_FP32)  # chunking changes nothing
    for p, row in zip(prompts, batched):
        alone = [sum(gen.score(p.prompt_ids, r, p.images)) for r in replies]
        assert np.allclose(row, alone, atol=1e-4)
    # Temperature scales the logits before the softmax: at T=0.5 the likeliest reply gains mass.
    cooled = np.array(gen.score_replies(prompts, replies, temperature=0.5))
    assert not np.allclose(cooled, batched, atol=1e-3)
    with pytest.raises(ValueError, match="temperature"):
        gen.score_replies(prompts, replies, temperature=0.0)

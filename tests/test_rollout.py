"""The multi-turn rollout engine: grouping, env stepping, invalid turns, records, real-model episodes."""

import re

import numpy as np
import pytest
import torch

from mazegym.llm import format_action
from mazegym.maze import sample_maze
from mazegym.solver import shortest_path_actions
from runners.rollout.generation.base import GenerationResult, Prompt, SamplingConfig
from runners.rollout.generation.hf import HFGenerator
from runners.rollout.generation.prompts import ChatEncoder
from runners.rollout.collect import RolloutConfig, collect_groups, evaluate_mazes, rollout_metrics
from runners.models.tiny import build_tiny_text_lm, build_tiny_vlm, build_tokenizer


class ScriptedGenerator:
    """A Generator whose replies come from a function of (prompt index in batch, call number, prompt)."""

    def __init__(self, reply_fn, adapter_version: int = 0):
        self.tokenizer = build_tokenizer()
        self.encoder = ChatEncoder(self.tokenizer)
        self.reply_fn = reply_fn
        self.adapter_version = adapter_version
        self.calls: list[int] = []  # batch size of every generate call

    def generate(self, prompts: list[Prompt], sampling: SamplingConfig) -> list[GenerationResult]:
        self.calls.append(len(prompts))
        out = []
        for i, p in enumerate(prompts):
            text, finish = self.reply_fn(i, len(self.calls) - 1, p)
            clean = text.encode("utf-8", "replace").decode("utf-8")
            ids = self.tokenizer.encode(clean, add_special_tokens=False)[: sampling.max_new_tokens]
            # The raw script text is returned as is: a backend may hand back anything.
            out.append(
                GenerationResult(
                    ids,
                    [-1.0] * len(ids),
                    text if len(ids) < sampling.max_new_tokens else self.tokenizer.decode(ids),
                    finish,
                )
            )
        return out

    def load_adapter(self, path, version):
        self.adapter_version = version

    def score(self, prompt_ids, response_ids, images=None):
        return [-1.0] * len(response_ids)


def _mazes(n, size=7, seed=0):
    return [sample_maze(np.random.default_rng(seed + i), size) for i in range(n)]


def test_groups_play_the_same_maze_and_batch_all_episodes():
    mazes = _mazes(3)
    gen = ScriptedGenerator(lambda i, call, p: ("<action>right</action>", "stop"))
    config = RolloutConfig(group_size=4, max_moves=5, max_new_tokens=16)
    episodes = collect_groups(gen, mazes, config, weights_version=7, group_offset=10)
    assert len(episodes) == 12
    for g, maze in enumerate(mazes):
        group = [e for e in episodes if e.group_id == 10 + g]
        assert len(group) == 4 and {e.maze_id for e in group} == {maze.maze_id}
    assert all(e.weights_version == 7 for e in episodes)
    # One generate call per turn with every active episode: 12, then fewer as episodes end.
    assert gen.calls[0] == 12 and len(gen.calls) <= 5 and sorted(gen.calls, reverse=True) == gen.calls


def _oracle_reply(tokenizer):
    """Read the last map in the prompt and answer with the first move of a shortest path."""

    def reply(i, call, prompt):
        text = tokenizer.decode(prompt.prompt_ids)
        rows = re.match(r"[^\n<]*(?:\n[^\n<]*)*", text.rsplit("Map:\n", 1)[1]).group(0).split("\n")
        rows = [row for row in rows if row and len(row) == len(rows[0])]
        grid = np.array([[ch == "#" for ch in row] for row in rows])
        find = lambda ch: next((r, row.index(ch)) for r, row in enumerate(rows) if ch in row)  # noqa: E731
        action = shortest_path_actions(grid, find("A"), find("G"))[0]
        return f"I will go. {format_action(action)}", "stop"

    return reply


def test_oracle_replies_solve_every_maze_with_spl_one():
    mazes = _mazes(3, size=9)
    tokenizer = build_tokenizer()
    gen = ScriptedGenerator(_oracle_reply(tokenizer))
    config = RolloutConfig(group_size=2, max_moves=40, max_new_tokens=32, history="none")
    episodes = collect_groups(gen, mazes, config)
    for e, maze in zip(episodes, [m for m in mazes for _ in range(2)]):
        plan = shortest_path_actions(maze.grid, maze.start, maze.goal)
        assert e.success and not e.truncated
        assert e.num_moves == e.optimal_moves == len(plan)
        assert e.spl == 1.0 and e.episode_return == 1.0
        assert [t.action for t in e.turns] == plan
        assert e.turns[-1].reward == 1.0 and all(t.reward == 0.0 for t in e.turns[:-1])


MALFORMED = [
    ("", "stop"),  # empty
    ("a" * 200, "length"),  # endless until max_new_tokens
    ("\udcff\x00\x01\x7f\ufffd\ufffd", "stop"),  # garbage / non-UTF-8-looking bytes
    ("I think the answer is (move, 9)", "stop"),  # wrong format
    ("<action>stop</action>", "stop"),  # stop is not available without require_stop
]


def test_malformed_replies_become_invalid_turns_that_use_a_move():
    mazes = _mazes(1)
    script = MALFORMED + [("<action>left</action>", "stop")]
    gen = ScriptedGenerator(lambda i, call, p: script[call % len(script)])
    config = RolloutConfig(group_size=1, max_moves=len(script), max_new_tokens=24)
    (episode,) = collect_groups(gen, mazes, config)
    assert episode.num_moves == len(script)  # every reply used up a move
    assert [t.valid for t in episode.turns] == [False] * len(MALFORMED) + [True]
    assert all(t.action is None and t.reward == 0.0 for t in episode.turns[:-1])
    assert episode.turns[-1].action == 2
    assert episode.truncated and not episode.success
    assert episode.info["finish_reasons"][1] == "length"
    assert len(episode.turns[1].response_ids) == 24
    # The next user message carries the feedback (full history: it is in the next prompt).
    tok = gen.tokenizer
    second = tok.decode(episode.turns[1].prompt_ids)
    assert "Invalid action (empty reply)" in second
    assert "not an available action" in tok.decode(episode.turns[5].prompt_ids)
    assert rollout_metrics([episode])["invalid_turn_rate"] == pytest.approx(5 / 6)


def test_history_modes_bound_the_prompt():
    mazes = _mazes(1)
    gen = ScriptedGenerator(lambda i, call, p: ("<action>up</action>", "stop"))
    lengths = {}
    for history in ("full", "last_k", "none"):
        config = RolloutConfig(group_size=1, max_moves=6, history=history, history_k=1)
        (episode,) = collect_groups(gen, mazes, config)
        lengths[history] = [len(t.prompt_ids) for t in episode.turns]
    assert lengths["full"][-1] > lengths["last_k"][-1] > lengths["none"][-1]
    assert max(lengths["none"]) < min(lengths["last_k"][2:])  # no history: the prompt does not grow
    assert abs(lengths["none"][-1] - lengths["none"][1]) < 30  # only feedback wording and digits change
    assert lengths["full"] == sorted(lengths["full"])


def test_episode_outgrowing_the_context_ends_truncated_instead_of_crashing():
    gen = ScriptedGenerator(lambda i, call, p: ("<action>up</action>", "stop"))
    config = RolloutConfig(group_size=1, max_moves=10, history="full", max_new_tokens=16)
    (full,) = collect_groups(gen, _mazes(1), config)
    lengths = [len(t.prompt_ids) for t in full.turns]
    gen.max_model_len = lengths[2] + 16  # room for exactly three turns
    (episode,) = collect_groups(gen, _mazes(1), config)
    assert episode.num_moves == 3 and episode.truncated and not episode.success
    assert episode.info["context_overflow"] is True


def test_bad_config_fails_fast():
    from runners.config.fields import check_fields

    with pytest.raises(ValueError, match="history='some' is not allowed"):  # each field's one check
        check_fields(RolloutConfig(history="some"))
    with pytest.raises(ValueError, match="group_size=0 is out of range"):
        check_fields(RolloutConfig(group_size=0))


# ---------------------------------------------------------------------------- real tiny models
@pytest.fixture(scope="module")
def text_gen(tmp_path_factory):
    return HFGenerator(build_tiny_text_lm(tmp_path_factory.mktemp("m") / "text"))


def test_tiny_text_model_episodes_are_well_formed(text_gen):
    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    mazes = _mazes(2)
    config = RolloutConfig(group_size=2, max_moves=3, max_new_tokens=8, temperature=1.0)
    episodes = collect_groups(text_gen, mazes, config, seed=5)
    assert len(episodes) == 4
    tok = text_gen.tokenizer
    for e in episodes:
        assert 1 <= e.num_moves <= 3 and (e.success or e.truncated)
        for t in e.turns:
            assert len(t.logprobs) == len(t.response_ids) >= 1
            assert t.loss_mask == [0] * len(t.prompt_ids) + [1] * len(t.response_ids)
            assert t.text == tok.decode(t.response_ids, skip_special_tokens=True)
            assert t.valid == (t.action is not None)
            # Incremental (memoised) prompt ids == a full re-tokenisation of the rendered prompt.
            assert t.prompt_ids == tok.encode(tok.decode(t.prompt_ids), add_special_tokens=False)
    # Sampling log-probs match a fresh forward pass of the trainer policy (fp32, T = 1).
    policy = LoRALMPolicy.from_pretrained(text_gen.model_path, lora=LoRAConfig(rank=4, alpha=8), dtype=torch.float32)
    turns = [t for e in episodes for t in e.turns]
    with torch.no_grad():
        out = policy.score_turns(turns)
    for i, t in enumerate(turns):
        assert np.allclose(out.logprobs[i, : len(t.logprobs)].numpy(), t.logprobs, atol=1e-4)


def test_greedy_evaluation_is_deterministic(text_gen):
    mazes = _mazes(2)
    config = RolloutConfig(max_moves=2, max_new_tokens=6)
    a = evaluate_mazes(text_gen, mazes, config)
    b = evaluate_mazes(text_gen, mazes, config)
    assert [e.group_id for e in a] == [0, 1]
    assert [[t.response_ids for t in e.turns] for e in a] == [[t.response_ids for t in e.turns] for e in b]


def test_tiny_vlm_episodes_carry_images(tmp_path_factory):
    gen = HFGenerator(build_tiny_vlm(tmp_path_factory.mktemp("m") / "vlm"))
    config = RolloutConfig(group_size=2, max_moves=3, max_new_tokens=6, obs_mode="image", history="last_k", history_k=1)
    episodes = collect_groups(gen, _mazes(1), config)
    for e in episodes:
        for n, t in enumerate(e.turns):
            assert len(t.images) == min(n, 1) + 1  # current frame + at most one past frame
            assert all(im.shape == (175, 175, 3) and im.dtype == np.uint8 for im in t.images)
            assert sum(tok == gen.image_token_id for tok in t.prompt_ids) == 16 * len(t.images)
            assert np.allclose(gen.score(t.prompt_ids, t.response_ids, t.images), t.logprobs, atol=1e-4)


def test_evaluation_keeps_no_frames_and_prompts_match_training_plays(tmp_path_factory):
    """Greedy evaluation drops each turn's frames (nothing trains on them) without changing a single prompt or move."""
    gen = HFGenerator(build_tiny_vlm(tmp_path_factory.mktemp("m") / "vlm"))
    mazes = _mazes(2)
    for history in ("last_k", "none"):
        config = RolloutConfig(max_moves=4, max_new_tokens=6, obs_mode="image", history=history, history_k=1)
        kept = collect_groups(gen, mazes, RolloutConfig(**{**config.__dict__, "temperature": 0.0, "group_size": 1}))
        evaluated = evaluate_mazes(gen, mazes, config)
        assert all(t.images for e in kept for t in e.turns)
        assert all(t.images == [] for e in evaluated for t in e.turns)
        assert [[(t.prompt_ids, t.response_ids) for t in e.turns] for e in evaluated] == [
            [(t.prompt_ids, t.response_ids) for t in e.turns] for e in kept
        ]

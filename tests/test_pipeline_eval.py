"""Evaluation metrics (hand-computed) and the eval output schema; SFT demonstrations match the rollout format."""

import json

import numpy as np
import pytest

from algos.data import Episode, Turn
from runners.rollout.evaluate import SUMMARY_KEYS, case_study_table, format_table, summarize


def _episode(success: bool, moves: int, optimal: int, invalid: int = 0, size: int = 7) -> Episode:
    turns = [Turn(valid=i >= invalid) for i in range(moves)]
    return Episode(turns=turns, success=success, optimal_moves=optimal, info={"size": size})


def test_summary_numbers_by_hand():
    eps = [
        _episode(True, 10, 8),  # SPL 0.8
        _episode(True, 6, 6),  # SPL 1.0
        _episode(False, 16, 12, invalid=4),  # SPL 0, 4 invalid turns
        _episode(True, 12, 12, size=9),  # SPL 1.0
    ]
    s = summarize(eps)
    assert s["solve_rate"] == pytest.approx(3 / 4)
    assert s["solved"] == 3 and s["episodes"] == 4
    assert s["spl"] == pytest.approx((0.8 + 1.0 + 0.0 + 1.0) / 4)
    assert s["invalid_action_rate"] == pytest.approx(4 / (10 + 6 + 16 + 12))
    assert s["mean_moves"] == pytest.approx((10 + 6 + 16 + 12) / 4)
    assert set(s["by_size"]) == {"7", "9"}
    assert s["by_size"]["7"]["solve_rate"] == pytest.approx(2 / 3)
    assert s["by_size"]["9"]["spl"] == pytest.approx(1.0)
    assert s["solve_rate_ci95"] == pytest.approx([0.3006, 0.9544], abs=5e-5)  # Wilson 95% of 3/4
    assert s["by_size"]["9"]["solve_rate_ci95"] == pytest.approx([0.2065, 1.0], abs=5e-5)  # of 1/1


def test_solve_rate_ignores_reward_shaping():
    # A failed episode with positive (shaped / format) reward is still unsolved.
    ep = _episode(False, 16, 8)
    ep.turns[0].reward = 0.9
    assert summarize([ep])["solve_rate"] == 0.0


def test_tables_are_readable():
    s = summarize([_episode(True, 10, 8), _episode(False, 16, 12)])
    text = case_study_table(s, s, "heldout-7x7")
    assert "SFT (before RL)" in text and "after RL" in text and "50.00%" in text and "1/2" in text
    assert "95% interval" in text and "9.5-90.5%" in text
    assert "size" in format_table({"x": s})


@pytest.fixture(scope="module")
def tiny_generator(tmp_path_factory):
    import torch

    from runners.build import build_generator, prepare_base_model
    from runners.config.presets import get_preset

    torch.set_num_threads(1)
    cfg = get_preset("cpu-tiny")
    cfg.run_dir = str(tmp_path_factory.mktemp("evalrun"))
    return cfg, build_generator(cfg, prepare_base_model(cfg))


def test_eval_output_schema(tiny_generator, tmp_path):
    from runners.rollout.evaluate import evaluate_set, write_json

    cfg, gen = tiny_generator
    res, episodes = evaluate_set(gen, "heldout-7x7", cfg.rollout, return_episodes=True)
    assert res["set"] == "heldout-7x7" and res["decoding"] == "greedy"
    for key in SUMMARY_KEYS:
        assert key in res and key in res["by_size"]["7"]
    assert res["episodes"] == 64 == len(episodes)
    assert 0.0 <= res["solve_rate"] <= 1.0 and 0.0 <= res["spl"] <= res["solve_rate"]
    assert res["mean_moves"] <= 16
    assert res["solve_rate"] == pytest.approx(np.mean([e.success for e in episodes]))
    data = json.loads(write_json(tmp_path / "e.json", res).read_text())
    assert data["by_size"]["7"]["episodes"] == 64


def test_eval_set_mazes_plays_the_first_mazes_of_a_named_set_only(tiny_generator):
    """eval.set_mazes: the named set's first N mazes, the same episodes the whole set's evaluation begins with;
    other sets whole."""
    import runners.config as C
    from runners.rollout.evaluate import evaluate_set
    from runners.train.steps import eval_step

    cfg, gen = tiny_generator
    limited = C.apply_overrides(cfg, ["eval.set_mazes={heldout-7x7: 5}"])
    part = eval_step(gen, limited, "heldout-7x7")
    assert part["episodes"] == 5 and [m["index"] for m in part["mazes"]] == [0, 1, 2, 3, 4]
    whole = evaluate_set(gen, "heldout-7x7", cfg.rollout)
    assert [m["actions"] for m in part["mazes"]] == [m["actions"] for m in whole["mazes"][:5]]
    assert eval_step(gen, limited, "heldout-5x5")["episodes"] == 16


def test_sft_demo_turns_match_rollout_prompts(tiny_generator):
    """A demonstration turn's prompt is token-for-token what the rollout feeds the model."""
    from mazegym.evalsets import load_eval_set
    from mazegym.envs.vismaze import VisMazeEnv
    from mazegym.llm import build_messages, parse_action, system_prompt, user_message
    from mazegym.solver import oracle_actions
    from runners.train.demos import demo_turns

    cfg, gen = tiny_generator
    maze = load_eval_set("heldout-7x7")[3]
    turns = demo_turns(
        maze, gen.encoder, max_moves=16, obs_mode="text", history="none", eos_id=gen.tokenizer.eos_token_id
    )
    actions = oracle_actions(maze)
    assert [t.action for t in turns] == actions
    env = VisMazeEnv(size=7, max_moves=16, obs_mode="text")
    obs, info = env.reset(options={"maze": maze})
    for t, a in zip(turns, actions):
        ids, _ = gen.encoder.encode(
            build_messages(system_prompt(7, 16, "text"), [], user_message(obs, info, obs_mode="text"), "none")
        )
        assert t.prompt_ids == ids
        assert t.response_ids[-1] == gen.tokenizer.eos_token_id
        assert parse_action(gen.tokenizer.decode(t.response_ids, skip_special_tokens=True)).action == a
        obs, _, _, _, info = env.step(a)
    # task tokens make the system prompt one token: a turn is ~100 tokens, not ~530 bytes
    assert len(turns[0].prompt_ids) < 130


def test_episode_weights_make_every_episode_count_once():
    from algos.advantages import episode_weights

    eps = [_episode(True, 4, 4), _episode(False, 16, 8), _episode(True, 10, 8)]
    w = episode_weights(eps)
    assert w.shape == (30,)
    mean_turns = 30 / 3
    assert w[:4].tolist() == pytest.approx([mean_turns / 4] * 4)
    assert w[4:20].tolist() == pytest.approx([mean_turns / 16] * 16)
    # each episode's turns sum to the same total weight
    totals = [w[:4].sum().item(), w[4:20].sum().item(), w[20:].sum().item()]
    assert totals == pytest.approx([mean_turns] * 3)
    # a group with advantages +1 (short win) and -1 (long loss) now pushes with zero net weight
    adv = torch_tensor([1.0] * 4 + [-1.0] * 16)
    assert float((adv * episode_weights(eps[:2])).sum()) == pytest.approx(0.0)


def torch_tensor(values):
    import torch

    return torch.tensor(values)


def test_sft_random_starts_cover_off_path_cells_and_never_an_eval_maze(tiny_generator):
    """Demonstrations from random open cells: every turn is the BFS move there, the start varies, no eval maze."""
    from mazegym.evalsets import MazeStream, is_eval_maze
    from mazegym.solver import bfs_distances, MOVES
    from runners.train.demos import demo_turns, random_start_maze

    cfg, gen = tiny_generator
    stream = MazeStream(size=7, seed=5)
    rng = np.random.default_rng(0)
    starts = set()
    for _ in range(12):
        maze = next(stream)
        moved = random_start_maze(maze, rng)
        assert moved.goal == maze.goal and not moved.grid[moved.start] and not is_eval_maze(moved.maze_id)
        starts.add(moved.start)
        turns = demo_turns(
            maze,
            gen.encoder,
            max_moves=16,
            obs_mode="text",
            history="none",
            eos_id=gen.tokenizer.eos_token_id,
            rng=np.random.default_rng(len(starts)),
            random_start=True,
        )
        dist = bfs_distances(maze.grid, maze.goal)
        for t in turns:
            r, c = (int(v) for v in t.state.split(","))
            dr, dc = MOVES[t.action]
            assert dist[r + dr, c + dc] == dist[r, c] - 1  # each demonstrated move is a shortest-path move
    assert len(starts) > 6

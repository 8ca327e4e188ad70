"""VisGym's maze_2d protocol: splits, action strings, and scoring with require_stop=True."""

import ast

import numpy as np
import pytest

from mazegym import load_eval_set
from mazegym.integrations.visgym import VISGYM_ACTIONS, VISGYM_SPLITS, env_id_for, make_env
from mazegym.llm import format_action, parse_action
from mazegym.solver import oracle_actions
from mazegym.wrappers import TextActionWrapper

DIRECTIONS = {0: (0, 1), 1: (-1, 0), 2: (0, -1), 3: (1, 0)}


def visgym_success(spec, replies: list[str], max_steps: int) -> bool:
    """VisGym's rule, read off its maze_2d env and interactor: every reply is a step; only a stop on the goal pays."""
    agent = spec.start
    for step, reply in enumerate(replies):
        if step >= max_steps:
            return False  # the interactor truncates before asking again
        try:
            branch, payload = ast.literal_eval(reply)
        except Exception:
            continue  # unparseable: feedback only, the step is spent
        if branch == "stop" and payload == "stop":
            return agent == spec.goal
        if branch == "move" and payload in DIRECTIONS:
            dr, dc = DIRECTIONS[payload]
            nxt = (agent[0] + dr, agent[1] + dc)
            if not spec.grid[nxt]:
                agent = nxt
    return False


def mazegym_success(env, spec, replies: list[str]) -> bool:
    env.reset(options={"maze": spec})
    total = 0.0
    for reply in replies:
        _, reward, terminated, truncated, _ = env.step(reply)
        total += reward
        if terminated or truncated:
            break
    return total == 1.0


def test_splits_name_the_env_ids_and_eval_sets_with_visgym_limits():
    for split, (size, steps) in {"maze_2d/easy": (9, 20), "maze_2d/hard": (11, 30)}.items():
        env = make_env(split)
        assert env.unwrapped.size == size and env.unwrapped.max_moves == steps and env.unwrapped.require_stop
        assert {m.size for m in load_eval_set(VISGYM_SPLITS[split])} == {size}
    assert env_id_for("VisMaze-v0") == "VisMaze-v0"
    with pytest.raises(ValueError, match="unknown maze"):
        env_id_for("maze_3d/easy")


def test_action_strings_map_both_ways():
    for text, action in VISGYM_ACTIONS.items():
        assert parse_action(text, require_stop=True).action == action
        assert format_action(action, style="visgym") == text


@pytest.mark.parametrize("split", sorted(VISGYM_SPLITS))
def test_require_stop_scores_like_visgym(split):
    """Random replies (moves, stops, garbage) and near-solutions on the fixed mazes: same verdict as VisGym."""
    env = TextActionWrapper(make_env(split, obs_mode="text"))
    limit = env.unwrapped.max_moves
    rng = np.random.default_rng(0)
    vocabulary = list(VISGYM_ACTIONS) + ["('move', 7)", "move left please", "('jump', 1)"]
    verdicts = []
    for spec in load_eval_set(VISGYM_SPLITS[split])[:32]:
        solution = [format_action(a, style="visgym") for a in oracle_actions(spec, stop=True)]
        cases = [
            solution,  # solved
            solution[:-1],  # on the goal, never stops
            solution[:-1] + ["('move', 9)", "('stop', 'stop')"],  # a wasted step, then stop
            ["('stop', 'stop')"] + solution,  # stops at the start
            ["garbage"] * (limit - len(solution) + 1) + solution,  # runs out of steps just before the stop
            list(rng.choice(vocabulary, size=limit + 5)),
        ]
        for replies in cases:
            expected = visgym_success(spec, replies, limit)
            assert mazegym_success(env, spec, replies) == expected, (spec.maze_id, replies)
            verdicts.append(expected)
    assert any(verdicts) and not all(verdicts)

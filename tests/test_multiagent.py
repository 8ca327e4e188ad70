"""PettingZoo race env: API conformance and race semantics."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from mazegym.evalsets import load_eval_set
from mazegym.multiagent import VisMazeRace
from mazegym.solver import shortest_path_actions


@pytest.mark.parametrize("n_agents, obs_mode", [(1, "text"), (3, "both"), (2, "image")])
def test_parallel_api(n_agents, obs_mode):
    parallel_api_test(VisMazeRace(n_agents=n_agents, obs_mode=obs_mode), num_cycles=60)


def test_first_to_goal_wins_and_race_ends_for_all():
    spec = load_eval_set("VisMaze-v0")[0]
    env = VisMazeRace(n_agents=2, max_moves=50)
    obs, infos = env.reset(seed=0, options={"maze": spec})
    assert all(info["agent"] == spec.start for info in infos.values())
    path = shortest_path_actions(spec.grid, spec.start, spec.goal)
    blocked = int(
        np.flatnonzero(
            [spec.grid[spec.start[0] + dr, spec.start[1] + dc] for dr, dc in ((0, 1), (-1, 0), (0, -1), (1, 0))]
        )[0]
    )
    for i, a in enumerate(path):
        obs, rewards, terms, truncs, infos = env.step({"agent_0": a, "agent_1": blocked})
        if i < len(path) - 1:
            assert rewards == {"agent_0": 0.0, "agent_1": 0.0} and not any(terms.values())
    assert rewards == {"agent_0": 1.0, "agent_1": 0.0}
    assert terms == {"agent_0": True, "agent_1": True} and env.agents == []
    assert infos["agent_0"]["is_success"] and not infos["agent_1"]["is_success"]


def test_each_agent_sees_itself_as_A_and_rivals_as_B():
    env = VisMazeRace(n_agents=2, obs_mode="both")
    obs, infos = env.reset(seed=1)
    start = infos["agent_0"]["agent"]
    legal = next(
        a
        for a, (dr, dc) in enumerate(((0, 1), (-1, 0), (0, -1), (1, 0)))
        if not env.maze.grid[start[0] + dr, start[1] + dc]
    )
    obs, *_ = env.step({"agent_0": legal, "agent_1": legal ^ 2})  # agent_1 bumps or moves elsewhere
    for me, other in (("agent_0", "agent_1"), ("agent_1", "agent_0")):
        lines = obs[me]["text"].split("\n")
        (r, c), (ro, co) = env.positions[me], env.positions[other]
        assert lines[r][c] == "A"
        if (ro, co) != (r, c):
            assert lines[ro][co] == "B"
            assert tuple(obs[me]["image"][ro * 25 + 12, co * 25 + 12]) == (0, 160, 0)
        assert tuple(obs[me]["image"][r * 25 + 12, c * 25 + 12]) == (0, 0, 255)


def test_truncation_at_move_limit():
    env = VisMazeRace(n_agents=2, max_moves=3)
    env.reset(seed=2)
    for t in range(3):  # opposite corners of a 9x9 maze are >= 12 moves apart: nobody can win
        assert env.agents == ["agent_0", "agent_1"]
        _, rewards, terms, truncs, _ = env.step({a: 0 for a in env.agents})
        assert not any(terms.values()) and all(truncs.values()) == (t == 2) and sum(rewards.values()) == 0.0
    assert env.agents == []


def test_the_race_legend_names_each_agents_colour_and_is_drawn_under_the_frame():
    from mazegym.recording import with_legend
    from mazegym.render import AGENT_RGB, GOAL_RGB, OTHER_AGENT_RGB

    env = VisMazeRace(n_agents=3, size=9, render_mode="rgb_array")
    env.reset(seed=0)
    entries = env.legend(names={"agent_0": "oracle"})
    assert entries == [
        (AGENT_RGB, "agent_0 (oracle)"),
        (OTHER_AGENT_RGB, "agent_1"),
        (OTHER_AGENT_RGB, "agent_2"),
        (GOAL_RGB, "goal"),
    ]
    assert env.legend(viewer="agent_1")[:2] == [(OTHER_AGENT_RGB, "agent_0"), (AGENT_RGB, "agent_1")]
    frame = env.render()
    framed = with_legend(frame, entries)
    assert framed.shape[1] == frame.shape[1] and framed.shape[0] > frame.shape[0]
    assert np.array_equal(framed[: frame.shape[0]], frame)
    strip = framed[frame.shape[0] :]
    for rgb, _ in entries:  # a swatch of each colour ...
        assert (strip == rgb).all(axis=-1).any(), rgb
    assert (strip < 100).all(axis=-1).any()  # ... and the names, in black
    assert (with_legend(env.render(), entries).shape) == framed.shape  # every frame of a GIF gets the same legend

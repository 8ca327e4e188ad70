"""Conformance and semantics of VisMazeEnv, parametrized over every registered mazegym id."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import mazegym
from mazegym.envs.vismaze import VisMazeEnv
from mazegym.solver import MOVES, shortest_path_actions

ENV_IDS = sorted(env_id for env_id, spec in gym.registry.items() if str(spec.entry_point).startswith("mazegym."))
INFO_KEYS = {
    "agent",
    "goal",
    "moves",
    "max_moves",
    "optimal_moves",
    "shortest_remaining",
    "invalid_move",
    "invalid_action",
    "action_mask",
    "maze_id",
    "is_success",
    "feedback",
}


def test_registry_has_the_presets():
    assert {
        "VisMaze-v0",
        "VisMaze-Hard-v0",
        "VisMaze-7x7-v0",
        "VisMaze-13x13-v0",
        "VisMaze-15x15-v0",
        "VisMaze-21x21-v0",
    } <= set(ENV_IDS)
    env = gym.make("VisMaze-v0").unwrapped
    assert (env.size, env.max_moves) == (9, 20)
    hard = gym.make("VisMaze-Hard-v0").unwrapped
    assert (hard.size, hard.max_moves) == (11, 30)
    assert gym.make("mazegym:VisMaze-v0").unwrapped.size == 9
    assert gym.make("VisMaze-v0", generator="dfs", size=13).unwrapped.size == 13  # variants are kwargs


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize(
    "kwargs", [{}, {"obs_mode": "text", "require_stop": True}, {"obs_mode": "image", "shaping": True}]
)
def test_check_env_without_warnings(env_id, kwargs, capsys):
    env = gym.make(env_id, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)  # also renders every mode through env.spec
    assert [str(w.message) for w in caught] == []


def _rollout(env, seed, actions):
    obs, info = env.reset(seed=seed)
    trace = [(obs, info["maze_id"], info["agent"])]
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        trace.append((obs, reward, terminated, truncated, info["agent"], info["feedback"]))
        if terminated or truncated:
            obs, info = env.reset()
            trace.append((obs, info["maze_id"]))
    return trace


def _same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_rollout(env_id):
    actions = np.random.default_rng(0).integers(0, 4, 60).tolist()
    a = _rollout(gym.make(env_id), 123, actions)
    b = _rollout(gym.make(env_id), 123, actions)
    assert _same(a, b)
    # other seeds give other mazes (5x5 has only 16, so two seeds may share one: look at a few)
    others = {_rollout(gym.make(env_id), seed, actions[:1])[0][1] for seed in range(124, 130)}
    assert others - {a[0][1]}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pickle_roundtrip_continues_identically(env_id):
    env = gym.make(env_id)
    env.reset(seed=5)
    for a in (0, 1, 2, 3):
        env.step(a)
    clone = pickle.loads(pickle.dumps(env))
    actions = np.random.default_rng(1).integers(0, 4, 30).tolist()
    assert _same(_rollout_steps(env, actions), _rollout_steps(clone, actions))


def _rollout_steps(env, actions):
    out = []
    for a in actions:
        step = env.step(a)
        out.append(step)
        if step[2] or step[3]:
            out.append(env.reset())
    return out


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_render_mode(env_id, capsys):
    rgb = gym.make(env_id, render_mode="rgb_array")
    obs, _ = rgb.reset(seed=3)
    frame = rgb.render()
    assert frame.dtype == np.uint8 and np.array_equal(frame, obs["image"])
    frame[:] = 0  # render returns a copy
    assert not np.array_equal(rgb.render(), frame)
    ansi = gym.make(env_id, render_mode="ansi")
    obs, _ = ansi.reset(seed=3)
    assert ansi.render() == obs["text"]
    human = gym.make(env_id, render_mode="human")
    obs, _ = human.reset(seed=3)
    capsys.readouterr()
    assert human.render() is None
    assert obs["text"] in capsys.readouterr().out  # human mode prints the map, no display needed
    text_only = gym.make(env_id, render_mode="rgb_array", obs_mode="text")
    text_only.reset(seed=3)
    assert np.array_equal(text_only.render(), frame_of(gym.make(env_id), 3))


def frame_of(env, seed):
    return env.reset(seed=seed)[0]["image"]


def _wall_action(info):
    return int(np.flatnonzero(info["action_mask"][:4] == 0)[0])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_truncation_exactly_at_move_limit(env_id):
    env = gym.make(env_id)
    obs, info = env.reset(seed=11)
    limit = info["max_moves"]
    for move in range(1, limit + 1):
        obs, reward, terminated, truncated, info = env.step(_wall_action(info))
        assert info["invalid_move"] and info["moves"] == move and reward == 0.0 and not terminated
        assert truncated == (move == limit)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reward_only_on_reaching_goal(env_id):
    env = gym.make(env_id, max_moves=10_000)
    obs, info = env.reset(seed=2)
    path = shortest_path_actions(env.unwrapped.spec_maze.grid, info["agent"], info["goal"])
    assert len(path) == info["optimal_moves"] == info["shortest_remaining"]
    for i, a in enumerate(path):
        obs, reward, terminated, truncated, info = env.step(a)
        last = i == len(path) - 1
        assert (reward, terminated, info["is_success"]) == ((1.0, True, True) if last else (0.0, False, False))
        assert info["shortest_remaining"] == len(path) - i - 1
    assert info["agent"] == info["goal"] and info["feedback"] == "Reached the goal!"
    # random play: reward is paid exactly when the agent stands on the goal
    env = gym.make(env_id)
    env.reset(seed=0)
    for a in np.random.default_rng(0).integers(0, 4, 3000).tolist():
        obs, reward, terminated, truncated, info = env.step(a)
        assert reward == (1.0 if info["agent"] == info["goal"] else 0.0) == float(terminated)
        if terminated or truncated:
            env.reset()


def test_goal_reached_on_the_last_move_is_success_not_truncation():
    env = gym.make("VisMaze-v0")
    obs, info = env.reset(seed=0)
    env = gym.make("VisMaze-v0", max_moves=info["optimal_moves"])
    obs, info = env.reset(seed=0)
    path = shortest_path_actions(env.unwrapped.spec_maze.grid, info["agent"], info["goal"])
    for a in path:
        obs, reward, terminated, truncated, info = env.step(a)
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_info_keys_and_action_mask_match_walls():
    env = gym.make("VisMaze-v0")
    obs, info = env.reset(seed=4)
    assert set(info) == INFO_KEYS and info["moves"] == 0 and info["feedback"] == ""
    rng = np.random.default_rng(4)
    for _ in range(200):
        grid = env.unwrapped.spec_maze.grid
        r, c = info["agent"]
        expected = [0 if grid[r + dr, c + dc] else 1 for dr, dc in MOVES]
        assert info["action_mask"].dtype == np.int8 and info["action_mask"].tolist() == expected
        a = int(rng.integers(4))
        obs, reward, terminated, truncated, info = env.step(a)
        assert set(info) == INFO_KEYS
        assert info["invalid_move"] == (expected[a] == 0)
        assert info["feedback"].startswith("Cannot move into a wall." if expected[a] == 0 else ("Moved", "Reached"))
        assert info["agent"] == ((r, c) if expected[a] == 0 else (r + MOVES[a][0], c + MOVES[a][1]))
        if terminated or truncated:
            obs, info = env.reset()


def test_require_stop_pays_only_for_stopping_on_goal():
    env = gym.make("VisMaze-v0", require_stop=True, max_moves=100)
    assert env.action_space.n == 5
    obs, info = env.reset(seed=8)
    assert info["action_mask"][4] == 1
    path = shortest_path_actions(env.unwrapped.spec_maze.grid, info["agent"], info["goal"])
    for a in path:
        obs, reward, terminated, truncated, info = env.step(a)
    assert info["agent"] == info["goal"] and (reward, terminated) == (0.0, False)  # reaching is not enough
    obs, reward, terminated, truncated, info = env.step(4)
    assert (reward, terminated, info["is_success"], info["feedback"]) == (1.0, True, True, "Stopped on the goal.")
    env.reset(seed=8)
    obs, reward, terminated, truncated, info = env.step(4)
    assert (reward, terminated, info["is_success"]) == (0.0, True, False)


def test_potential_shaping_matches_hand_computation():
    env = gym.make("VisMaze-v0", shaping=True, max_moves=100)
    obs, info = env.reset(seed=1)
    d0 = info["optimal_moves"]
    # a wall bump keeps the distance: shaping term 0
    _, reward, *_ = env.step(_wall_action(info))
    assert reward == pytest.approx(0.0)
    path = shortest_path_actions(env.unwrapped.spec_maze.grid, info["agent"], info["goal"])
    _, reward, *_, info = env.step(path[0])
    assert reward == pytest.approx(1.0 / d0)  # one step closer: (-(d0-1) + d0) / d0
    total = reward
    for a in path[1:]:
        _, reward, *_ = env.step(a)
        total += reward
    assert total == pytest.approx(2.0)  # telescopes to 1 along the path, plus the goal reward
    env = gym.make("VisMaze-v0", shaping=True, shaping_gamma=0.9, max_moves=100)
    obs, info = env.reset(seed=1)
    _, reward, *_ = env.step(_wall_action(info))
    assert reward == pytest.approx(0.9 * (-d0 / d0) + 1.0)  # gamma * phi(s) - phi(s) = 0.1


@pytest.mark.parametrize("generator", sorted(mazegym.GENERATORS))
def test_same_seed_same_maze_everywhere(generator):
    """Pinned ids: a change here means every stored seed now names a different maze."""
    pinned = {
        "wilson": ["bb7e623671ab735c", "83d09b2eeee67a85", "89fa38b875b0c35f"],
        "dfs": ["2f2f2f52e7c851e7", "73bc693de95d3d94", "68401c3d3cb79943"],
        "kruskal": ["b42f72e1c67853ac", "be2c71589302ddd0", "c56e59cf1b901b87"],
        "prim": ["b18e9b175184f5ee", "05ab06c11e797bf4", "f83ad8523782c1dc"],
    }
    env = gym.make("VisMaze-v0", generator=generator)
    assert [env.reset(seed=s)[1]["maze_id"] for s in (0, 1, 12345)] == pinned[generator]


def test_options_pin_a_maze_and_reject_a_wrong_size():
    env = gym.make("VisMaze-v0")
    env.reset(seed=3)
    spec = env.unwrapped.spec_maze
    obs, info = env.reset(seed=99, options={"maze": spec.to_dict()})
    assert info["maze_id"] == spec.maze_id and info["agent"] == spec.start
    with pytest.raises(ValueError, match="size"):
        gym.make("VisMaze-Hard-v0").reset(options={"maze": spec})


def test_image_has_visgym_look():
    env = VisMazeEnv(obs_mode="both")
    obs, info = env.reset(seed=0)
    img, px = obs["image"], 25
    assert img.shape == (225, 225, 3)
    (ar, ac), (gr, gc) = info["agent"], info["goal"]
    assert tuple(img[0, 0]) == (169, 169, 169)  # outer wall
    assert tuple(img[ar * px + 12, ac * px + 12]) == (0, 0, 255)  # agent disc centre
    assert tuple(img[ar * px + 1, ac * px + 1]) == (255, 255, 255)  # floor around the disc
    assert tuple(img[gr * px + 1, gc * px + 12]) == (255, 0, 0)  # goal square
    assert (img == (0, 0, 255)).all(axis=2).sum() == pytest.approx(np.pi * 6.25**2, rel=0.15)
    lines = obs["text"].split("\n")
    assert lines[ar][ac] == "A" and lines[gr][gc] == "G" and set(lines[0]) == {"#"}
    small = VisMazeEnv(cell_px=8).reset(seed=0)[0]["image"]
    assert small.shape == (72, 72, 3)


@pytest.mark.parametrize("mode, keys", [("both", {"image", "text"}), ("image", {"image"}), ("text", {"text"})])
def test_obs_mode_selects_keys(mode, keys):
    env = gym.make("VisMaze-v0", obs_mode=mode)
    obs, _ = env.reset(seed=0)
    assert set(obs) == keys == set(env.observation_space.spaces)
    assert env.observation_space.contains(obs)


def test_bad_configuration_fails_fast():
    for kwargs, match in [
        ({"size": 8}, "odd"),
        ({"obs_mode": "pixels"}, "obs_mode"),
        ({"generator": "nope"}, "generator"),
        ({"start_goal": "middle"}, "start_goal"),
        ({"max_moves": 0}, "max_moves"),
    ]:
        with pytest.raises(ValueError, match=match):
            VisMazeEnv(**kwargs)
    with pytest.raises(RuntimeError, match="reset"):
        VisMazeEnv().step(0)


def test_random_start_goal_places_distinct_cells():
    env = gym.make("VisMaze-13x13-v0", start_goal="random")
    for seed in range(30):
        _, info = env.reset(seed=seed)
        assert info["agent"] != info["goal"] and all(x % 2 == 1 for x in info["agent"] + info["goal"])


def test_mazegym_does_not_import_torch():
    code = (
        "import mazegym, mazegym.llm, mazegym.wrappers, mazegym.evalsets, mazegym.multiagent, mazegym.recording, sys; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_human_mode_renders_inside_reset_and_step(capsys):
    """Gymnasium's human mode renders by itself at reset and every step (render() was needed before)."""
    env = gym.make("VisMaze-v0", render_mode="human")
    obs, _ = env.reset(seed=3)
    assert obs["text"] in capsys.readouterr().out
    obs, *_ = env.step(int(np.flatnonzero(env.unwrapped._info(False, False, "")["action_mask"])[0]))
    assert obs["text"] in capsys.readouterr().out
    obs, *_ = env.unwrapped.step_invalid("Invalid action.")
    assert obs["text"] in capsys.readouterr().out
    quiet = gym.make("VisMaze-v0", render_mode="ansi")
    quiet.reset(seed=3)
    quiet.step(0)
    assert capsys.readouterr().out == ""


def test_the_move_limit_is_the_envs_own_and_the_spec_says_why():
    """No registered TimeLimit: ``max_moves`` passed to gym.make is the limit that applies (documented)."""
    for env_id in ENV_IDS:
        assert gym.spec(env_id).max_episode_steps is None, env_id
    env = gym.make("VisMaze-v0", max_moves=25, obs_mode="text")
    _, info = env.reset(seed=0)
    wall = int(np.flatnonzero(info["action_mask"] == 0)[0])  # the start is a corner: bumping stays there
    for _ in range(24):
        *_, terminated, truncated, info = env.step(wall)
        assert not (terminated or truncated), info["moves"]  # a TimeLimit of 20 from the registry would end it
    *_, terminated, truncated, info = env.step(wall)
    assert truncated and info["moves"] == 25
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "envs.md").read_text()
    assert "max_episode_steps" in page and 'gymnasium.make("VisMaze-v0", max_moves=50)' in page


def test_env_ids_and_eval_set_names_follow_one_rule():
    from pathlib import Path

    from mazegym.evalsets import EVAL_SETS, load_eval_set

    for name, info in EVAL_SETS.items():
        n = info.size
        assert (
            name == info.env_id
            or (name == f"heldout-{n}x{n}" and info.env_id == f"VisMaze-{n}x{n}-v0")
            or name == f"fresh-{n}x{n}"
            or (
                name == f"loops-{n}x{n}"
                and info.env_id == ("VisMaze-Loops-v0" if n == 9 else f"VisMaze-Loops-{n}x{n}-v0")
            )
            or (name == f"fresh-loops-{n}x{n}" and info.env_id == "VisMaze-Loops-v0")
        ), name
    page = (Path(__file__).resolve().parents[1] / "docs" / "envs.md").read_text()
    assert "Names: env ids and eval sets" in page
    with pytest.raises(KeyError, match="an env id; its fixed 64-maze set is 'heldout-7x7'"):
        load_eval_set("VisMaze-7x7-v0")


HAND_DRAWN_TREE = np.array(
    [
        [1, 1, 1, 1, 1],
        [1, 0, 1, 0, 1],
        [1, 0, 1, 0, 1],
        [1, 0, 0, 0, 1],
        [1, 1, 1, 1, 1],
    ],
    dtype=bool,
)
"""0 = floor, 1 = wall. From (1,1) to (3,3): down the left column, along the bottom row; (1,3)-(2,3) is a dead end."""


def test_dead_end_filling_on_hand_drawn_mazes():
    """On a perfect maze dead-end filling keeps the path alone; a loop survives it, on the way or beside it."""
    from mazegym.solver import dead_end_filling, dead_end_filling_keeps_loops

    tree = HAND_DRAWN_TREE
    assert dead_end_filling(tree, (1, 1), (3, 3)).tolist() == [6, 11, 16, 17, 18]  # the dead end (1,3)-(2,3) filled
    assert not dead_end_filling_keeps_loops(tree, (1, 1), (3, 3))
    # 7x7 with a ring: from (1,1) along the top to (1,5), down to (5,5); (3,1)-(3,3)-(1,3) closes a loop.
    ring = np.ones((7, 7), dtype=bool)
    for cell in [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (1, 5),
        (2, 5),
        (3, 5),
        (4, 5),
        (5, 5),
        (2, 1),
        (3, 1),
        (3, 2),
        (3, 3),
        (2, 3),
    ]:
        ring[cell] = False
    kept = {divmod(int(i), 7) for i in dead_end_filling(ring, (1, 1), (5, 5))}
    assert {(3, 1), (3, 2), (3, 3), (2, 3)} <= kept and dead_end_filling_keeps_loops(ring, (1, 1), (5, 5))
    beside = {divmod(int(i), 7) for i in dead_end_filling(ring, (1, 5), (5, 5))}
    assert (3, 2) in beside and dead_end_filling_keeps_loops(ring, (1, 5), (5, 5))  # a ring off the path stays too


def test_shortest_path_cells_on_a_hand_drawn_maze():
    """The squares between start and goal, both ends included; a dead end and a wall are not on it; every square of
    two equally short routes is; an unreachable goal gives none."""
    from mazegym.solver import shortest_path_cells

    grid = HAND_DRAWN_TREE
    cells = shortest_path_cells(grid, (1, 1), (3, 3))
    assert cells.tolist() == [6, 11, 16, 17, 18]  # (1,1) (2,1) (3,1) (3,2) (3,3), row-major on a 5-wide grid
    loop = np.zeros((4, 4), dtype=bool)  # open 4x4: two shortest routes round the square from (0,0) to (1,1)
    assert sorted(shortest_path_cells(loop, (0, 0), (1, 1)).tolist()) == [0, 1, 4, 5]
    walled = grid.copy()
    walled[3, 2] = True
    assert shortest_path_cells(walled, (1, 1), (3, 3)).size == 0

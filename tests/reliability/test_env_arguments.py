"""VisMaze refuses nonsense arguments with an error naming them; integer actions keep working."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import mazegym  # noqa: F401  (registers the envs)
from mazegym.envs.vismaze import VisMazeEnv
from mazegym.maze import MazeSpec


@pytest.mark.parametrize("action", [1.5, -0.5, 0.0, "1", np.float32(1.7), True, None, [1], np.array([1])])
def test_non_integer_actions_are_refused(action):
    env = VisMazeEnv()
    env.reset(seed=0)
    with pytest.raises(TypeError, match="action must be an integer"):
        env.step(action)
    assert env.moves == 0


@pytest.mark.parametrize("action", [1, np.int64(1), np.int8(1), np.uint8(1), np.array(1)])
def test_integer_actions_of_every_kind_are_accepted(action):
    env = VisMazeEnv()
    env.reset(seed=0)
    env.step(action)
    assert env.moves == 1


@pytest.mark.parametrize("action", [-1, 4, np.int64(9)])
def test_out_of_range_actions_are_refused(action):
    env = VisMazeEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="outside"):
        env.step(action)


def test_stepping_after_the_episode_ended_is_refused():
    env = VisMazeEnv(max_moves=2)
    env.reset(seed=0)
    env.step(2)
    _, _, terminated, truncated, info = env.step(2)
    assert truncated and info["moves"] == 2
    with pytest.raises(RuntimeError, match="episode is over.*reset"):
        env.step(0)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step_invalid()
    env.reset(seed=1)
    env.step(0)


def test_stepping_before_reset_is_refused():
    with pytest.raises(RuntimeError, match="reset"):
        VisMazeEnv().step(0)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"max_moves": 2.5}, "max_moves"),
        ({"max_moves": 0}, "max_moves"),
        ({"max_moves": "20"}, "max_moves"),
        ({"shaping_gamma": math.nan}, "shaping_gamma"),
        ({"shaping_gamma": math.inf}, "shaping_gamma"),
        ({"shaping_gamma": 1.5}, "shaping_gamma"),
        ({"extra_openings": -0.1}, "extra_openings"),
        ({"extra_openings": math.nan}, "extra_openings"),
        ({"size": 2001}, "size"),
        ({"size": 9.0}, "size"),
        ({"size": 4}, "size"),
        ({"cell_px": 2.5}, "cell_px"),
        ({"cell_px": 10_000}, "cell_px"),
        ({"shaping": "false"}, "shaping"),
        ({"require_stop": 1}, "require_stop"),
        ({"generator": "bogus"}, "generator"),
        ({"obs_mode": "pixels"}, "obs_mode"),
        ({"start_goal": ["corners"]}, "start_goal"),
        ({"render_mode": "window"}, "render_mode"),
    ],
)
def test_bad_constructor_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        VisMazeEnv(**kwargs)


def test_gym_make_checks_arguments_too():
    with pytest.raises(ValueError, match="max_moves"):
        gym.make("VisMaze-v0", max_moves=2.5)


def _maze_dict(**changes):
    spec = MazeSpec(
        grid=np.array(
            [
                [c == "#" for c in row]
                for row in ["#######", "#.....#", "#.###.#", "#.#.#.#", "#.###.#", "#.....#", "#######"]
            ]
        ),
        start=(1, 1),
        goal=(5, 5),
    )
    data = spec.to_dict()
    data.pop("maze_id")
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "maze, message",
    [
        (_maze_dict(goal=[3, 3]), "cannot be reached"),
        (_maze_dict(start=[1.0, 1]), "start"),
        (_maze_dict(start=[1.5, 1]), "start"),
        (_maze_dict(goal="55"), "goal"),
        (_maze_dict(rows=["#######", "#..X..#", "#.###.#", "#.#.#.#", "#.###.#", "#.....#", "#######"]), "'X'"),
        (_maze_dict(rows=["#######", "#.....#", "#.###.#", "#.#.#.#", "#.###.#", "#.....#", "######"]), "same length"),
        (_maze_dict(start=[0, 0]), "on a wall"),
        ([1, 2], "MazeSpec or its dict"),
    ],
)
def test_bad_maze_options_are_refused(maze, message):
    env = VisMazeEnv(size=7, max_moves=20)
    with pytest.raises(ValueError, match=message) as info:
        env.reset(options={"maze": maze})
    assert "options['maze']" in str(info.value)


def test_a_good_maze_option_still_works():
    env = VisMazeEnv(size=7, max_moves=20)
    _, info = env.reset(options={"maze": _maze_dict()})
    assert info["optimal_moves"] == 8


@pytest.mark.parametrize("start, message", [((-1, 1), "outside the grid"), ((0, 0), "on a wall"), ((5, 5), "differ")])
def test_a_maze_spec_built_directly_is_checked_too(start, message):
    spec = MazeSpec.from_dict(_maze_dict())
    bad = MazeSpec(grid=spec.grid, start=start, goal=spec.goal)  # the constructor does not validate
    env = VisMazeEnv(size=7, max_moves=20)
    with pytest.raises(ValueError, match=f"options\\['maze'\\].*{message}"):
        env.reset(options={"maze": bad})
    env.reset(options={"maze": spec})

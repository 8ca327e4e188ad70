"""Env input the env cannot mean is refused with a ValueError naming it: maze grids, options, frame sizes, and the
PettingZoo race, which runs the single env's checks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import mazegym  # noqa: F401
from mazegym.envs.vismaze import VisMazeEnv
from mazegym.maze import MazeSpec
from mazegym.multiagent import VisMazeRace


def _spec():
    env = gym.make("VisMaze-v0")
    env.reset(seed=0)
    return env, env.unwrapped.spec_maze


@pytest.mark.parametrize("cell", [0.4, float("nan"), 2, -1])
def test_grid_cells_other_than_walls_and_floors_are_refused(cell):
    env, spec = _spec()
    grid = spec.grid.astype(float)
    grid[0, 0] = cell
    maze = {"grid": grid.tolist(), "start": list(spec.start), "goal": list(spec.goal)}
    with pytest.raises(ValueError, match="booleans or the integers 0"):
        env.reset(options={"maze": maze})
    ok = {"grid": spec.grid.astype(int).tolist(), "start": list(spec.start), "goal": list(spec.goal)}
    assert env.reset(options={"maze": ok})[1]["maze_id"] == spec.maze_id


@pytest.mark.parametrize("cell", [0.4, float("nan"), 2, -1])
def test_a_maze_spec_built_directly_refuses_them_too(cell):
    """The env and the race take MazeSpec objects as well as dicts: the same cells are refused either way."""
    from mazegym.maze import MazeSpec

    env, spec = _spec()
    grid = spec.grid.astype(float)
    grid[0, 0] = cell
    with pytest.raises(ValueError, match="booleans or the integers 0"):
        MazeSpec(grid=grid, start=spec.start, goal=spec.goal)
    assert MazeSpec(grid=spec.grid.astype(int), start=spec.start, goal=spec.goal).maze_id == spec.maze_id


@pytest.mark.parametrize("options", [[1, 2], "maze", 3])
def test_options_must_be_a_dict(options):
    env, _ = _spec()
    with pytest.raises(ValueError, match="options must be a dict"):
        env.reset(options=options)


def test_a_frame_too_large_to_allocate_is_refused_up_front():
    with pytest.raises(ValueError, match="size x cell_px"):
        VisMazeEnv(size=255, cell_px=256)


@pytest.mark.parametrize(
    "kwargs",
    [{"size": 1001}, {"size": 9.0}, {"n_agents": 0}, {"cell_px": "25"}, {"max_moves": True}, {"obs_mode": "pixels"}],
)
def test_the_race_checks_its_arguments_as_the_single_env_does(kwargs):
    with pytest.raises(ValueError):
        VisMazeRace(**kwargs)


@pytest.mark.parametrize("action", [-1, 4, 1.5, "up", True, None])
def test_the_race_refuses_actions_outside_its_space(action):
    race = VisMazeRace(n_agents=2)
    race.reset(seed=0)
    with pytest.raises(ValueError, match="agent_0 must be an integer in 0..3"):
        race.step({"agent_0": action, "agent_1": 0})
    race.step({"agent_0": np.int64(0), "agent_1": 1})  # numpy ints are fine


def test_the_race_refuses_a_maze_off_the_grid_or_without_a_way_to_the_goal():
    _, spec = _spec()
    race = VisMazeRace(n_agents=2)
    off_grid = {"grid": spec.grid.tolist(), "start": [-1, 1], "goal": list(spec.goal)}
    with pytest.raises(ValueError, match=r"start \(-1, 1\) is outside the grid"):
        race.reset(options={"maze": off_grid})
    with pytest.raises(ValueError, match=r"start \(-1, 1\) is outside the grid"):
        race.reset(options={"maze": MazeSpec(grid=spec.grid, start=(-1, 1), goal=spec.goal)})
    walled = spec.grid.copy()
    r, c = spec.goal
    walled[r - 1, c] = walled[r + 1, c] = walled[r, c - 1] = walled[r, c + 1] = True
    with pytest.raises(ValueError, match="cannot be reached"):
        race.reset(options={"maze": {"grid": walled.tolist(), "start": list(spec.start), "goal": list(spec.goal)}})

"""Quickstart: a random agent vs the BFS oracle on VisMaze-v0, side by side in one GIF.

Teaches the Gymnasium loop (``gym.make`` / ``reset`` / ``step``), the ``info`` the env returns
(``action_mask``, ``is_success``, ``optimal_moves``) and episode replays from ``(maze, actions)``.
The oracle (:mod:`mazegym.solver`) is a baseline that reads the maze, not a learned policy::

    python examples/01_quickstart.py [--episodes 100] [--out examples/out]

Writes ``OUT/01_random_vs_oracle.gif`` (random left, oracle right, each panel titled with its agent and
outcome) and prints both success rates.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import mazegym  # registers VisMaze-v0
from mazegym.recording import replay, save_gif, titled
from mazegym.solver import shortest_path_actions


def random_agent(env: gym.Env, obs, info) -> int:
    """A legal move picked uniformly at random (the action mask keeps it off the walls)."""
    return int(env.action_space.sample(mask=info["action_mask"]))


def oracle_agent(env: gym.Env, obs, info) -> int:
    """The first move of a shortest path from where the agent stands (BFS on the true maze)."""
    maze = env.unwrapped.spec_maze
    return shortest_path_actions(maze.grid, tuple(info["agent"]), maze.goal)[0]


def play(env: gym.Env, agent, seed: int) -> tuple[bool, list[int], mazegym.MazeSpec]:
    """One episode on the maze of ``seed``; returns (success, actions, maze)."""
    obs, info = env.reset(seed=seed)
    env.action_space.seed(seed)
    actions, done = [], False
    while not done:
        action = agent(env, obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        done = terminated or truncated
    return bool(info["is_success"]), actions, env.unwrapped.spec_maze


def side_by_side(left: list[np.ndarray], right: list[np.ndarray], gap: int = 10) -> list[np.ndarray]:
    """Pair two frame lists (the shorter one holds its last frame) with a white gap between them."""
    n = max(len(left), len(right))
    left, right = left + left[-1:] * (n - len(left)), right + right[-1:] * (n - len(right))
    white = np.full((left[0].shape[0], gap, 3), 255, dtype=np.uint8)
    return [np.concatenate([a, white, b], axis=1) for a, b in zip(left, right)]


def main() -> None:
    """Play both agents on the same mazes, print success rates, save the GIF of the first maze."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100, help="mazes per agent")
    parser.add_argument("--out", default="examples/out", help="where the GIF goes")
    parser.add_argument("--smoke", action="store_true", help="tiny budget (CI)")
    args = parser.parse_args()
    episodes = 10 if args.smoke else args.episodes

    env = gym.make("VisMaze-v0", obs_mode="image")  # 9x9 grid, 20 moves, sparse reward 1.0 at the goal
    rates, first = {}, {}
    for name, agent in [("random", random_agent), ("oracle", oracle_agent)]:
        results = [play(env, agent, seed) for seed in range(episodes)]
        rates[name] = sum(ok for ok, _, _ in results) / episodes
        first[name] = results[0]
        print(f"{name:>6}: solved {rates[name]:.0%} of {episodes} mazes")

    # An episode is its maze plus its actions: replay both on the first maze to get the frames,
    # each panel under a title naming its agent and how its episode ended.
    maze = first["random"][2]
    panels = []
    for name, label in (("random", "random agent"), ("oracle", "BFS oracle")):
        solved, actions, _ = first[name]
        title = f"{label}: {'solved' if solved else 'failed'} in {len(actions)} moves"
        panels.append([titled(frame, title) for frame in replay(maze, actions).frames])
    frames = side_by_side(*panels)
    path = save_gif(frames, f"{args.out}/01_random_vs_oracle.gif")
    print(f"wrote {path} (random left, oracle right)")


if __name__ == "__main__":
    main()

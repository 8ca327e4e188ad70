"""A two-agent race (PettingZoo ``ParallelEnv``): the BFS oracle against a random walker, to a GIF.

Teaches the multi-agent API of :class:`mazegym.multiagent.VisMazeRace`: ``reset`` and ``step``
take and return one dict entry per agent, agents move at the same time, and the race ends for
everyone when the first one reaches the goal. Each agent sees itself as the blue disc and its
rival as a green one::

    python examples/07_race.py [--races 20] [--out examples/out]

Writes ``OUT/07_race.gif`` (the first race, from agent_0's view, over a legend of the discs' colours) and prints
the win counts.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from mazegym.multiagent import VisMazeRace
from mazegym.recording import save_gif, with_legend
from mazegym.solver import MOVES, shortest_path_actions


def race(env: VisMazeRace, seed: int) -> tuple[str, list[np.ndarray]]:
    """One race, oracle (agent_0) vs random legal moves (agent_1); returns (winner, frames)."""
    observations, infos = env.reset(seed=seed)
    rng, maze = np.random.default_rng(seed), env.maze
    frames, winner = [env.render()], "nobody"
    while env.agents:
        actions = {"agent_0": shortest_path_actions(maze.grid, infos["agent_0"]["agent"], maze.goal)[0]}
        r, c = infos["agent_1"]["agent"]
        legal = [a for a, (dr, dc) in enumerate(MOVES) if not maze.grid[r + dr, c + dc]]
        actions["agent_1"] = int(rng.choice(legal))
        observations, rewards, terminations, truncations, infos = env.step(actions)
        frames.append(env.render())
        winners = [agent for agent, reward in rewards.items() if reward > 0]
        if winners:
            winner = " and ".join(winners)
    return winner, frames


def main() -> None:
    """Run the races, count the winners, save the first race as a GIF."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--races", type=int, default=20)
    parser.add_argument("--out", default="examples/out", help="where the GIF goes")
    parser.add_argument("--smoke", action="store_true", help="tiny budget (CI)")
    args = parser.parse_args()

    env = VisMazeRace(n_agents=2, size=9, max_moves=30, render_mode="rgb_array")
    wins, first = Counter(), None
    for seed in range(3 if args.smoke else args.races):
        winner, frames = race(env, seed)
        wins[winner] += 1
        first = first or frames
    print("wins:", dict(wins), "(agent_0 = BFS oracle, agent_1 = random)")
    legend = env.legend(names={"agent_0": "BFS oracle", "agent_1": "random"})  # which disc is which
    print(f"wrote {save_gif([with_legend(frame, legend) for frame in first], f'{args.out}/07_race.gif')}")


if __name__ == "__main__":
    main()

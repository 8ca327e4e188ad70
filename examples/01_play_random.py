"""Play VisMaze-v0 with a random policy and print the text map each step.

    .venv/bin/python examples/01_play_random.py [--seed 0] [--gif runs/random.gif]
"""

from __future__ import annotations

import argparse

import gymnasium as gym

import mazegym
from mazegym.recording import record_gif


def main() -> None:
    """Run one random episode, print it, optionally save it as a GIF (replayed from its actions)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gif", default=None, help="write the episode to this GIF path")
    args = parser.parse_args()

    env = gym.make("VisMaze-v0", render_mode="ansi")
    obs, info = env.reset(seed=args.seed)
    env.action_space.seed(args.seed)
    print(env.render(), f"\noptimal moves: {info['optimal_moves']}\n")
    actions = []
    terminated = truncated = False
    while not (terminated or truncated):
        action = env.action_space.sample(mask=info["action_mask"])  # never bump into walls
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(int(action))
        print(f"move {info['moves']:2d}: {mazegym.ACTION_NAMES[action]:5s} -> {info['feedback']}")
    print(env.render(), f"\nsuccess={info['is_success']} after {info['moves']} moves")
    if args.gif:
        record_gif(env.unwrapped.spec_maze, actions, args.gif)
        print(f"wrote {args.gif}")


if __name__ == "__main__":
    main()

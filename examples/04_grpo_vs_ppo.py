"""GRPO vs PPO on the small network policy: same mazes, same budget, one plot.

Teaches the training loop every algorithm in ``algos`` shares: sample mazes, play each one
``group_size`` times (a GRPO group), hand the episodes to ``algo.update``, evaluate greedily on
held-out mazes. The policy is ``algos.policies.net.MazeNetPolicy`` (a Value Iteration Network
reading the image observation); GRPO is critic-free (turn-level credit, a per-turn baseline),
PPO learns a value head and uses GAE::

    python examples/04_grpo_vs_ppo.py [--updates 30] [--size 7] [--out examples/out]

Writes ``OUT/04_grpo_vs_ppo.png`` (held-out greedy solve rate vs update) and prints both curves.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib
import torch

import algos
from algos.net_rollout import play_mazes, sample_mazes, solve_rate
from algos.policies.net import MazeNetPolicy

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SETTINGS = {
    "grpo": {"turn_credit": True, "gamma": 0.9, "turn_baseline": "turn_index"},
    "ppo": {"gamma": 0.97},
}
"""Per-algorithm hyperparameters; everything else (lr, epochs, batch) is shared."""


def train(name: str, updates: int, size: int, eval_every: int, seed: int = 0) -> list[tuple[int, float]]:
    """Train a fresh policy with algorithm ``name``; returns [(update, held-out greedy solve rate)]."""
    torch.manual_seed(seed)
    policy = MazeNetPolicy(grid_size=size)
    algo = algos.make(name, policy, lr=3e-2, epochs=2, minibatch_size=1024, old_logprobs="rollout", **SETTINGS[name])
    held_out = sample_mazes(32, size, seed=12345)
    exclude, max_moves = {m.maze_id for m in held_out}, 2 * size
    curve = [(0, solve_rate(policy, held_out, max_moves=max_moves))]
    for update in range(1, updates + 1):
        mazes = sample_mazes(8, size, seed=1000 + update, exclude=exclude)
        episodes = play_mazes(
            policy, mazes, group_size=8, max_moves=max_moves, seed=update, env_kwargs={"shaping": True}
        )  # potential-based: same optimal policy, denser signal
        algo.update(episodes)
        if update % eval_every == 0 or update == updates:
            curve.append((update, solve_rate(policy, held_out, max_moves=max_moves)))
    return curve


def main() -> None:
    """Train both algorithms, print and plot their held-out curves."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=30, help="updates per algorithm (8 mazes x 8 rollouts each)")
    parser.add_argument("--size", type=int, default=7, help="grid side (7 = 3x3 cells)")
    parser.add_argument("--out", default="examples/out", help="where the PNG goes")
    parser.add_argument("--smoke", action="store_true", help="tiny budget (CI)")
    args = parser.parse_args()
    updates, eval_every = (12, 6) if args.smoke else (args.updates, 3)
    torch.set_num_threads(1)

    plt.figure(figsize=(5.5, 3.5))
    for name in ("grpo", "ppo"):
        start = time.perf_counter()
        curve = train(name, updates, args.size, eval_every)
        print(
            f"{name}: "
            + "  ".join(f"u{u}={rate:.2f}" for u, rate in curve)
            + f"  ({time.perf_counter() - start:.0f}s)",
            flush=True,
        )
        plt.plot(*zip(*curve), marker="o", label=name.upper())
    plt.xlabel("update (64 episodes each)")
    plt.ylabel("held-out greedy solve rate")
    plt.ylim(-0.02, 1.02)
    plt.title(f"MazeNetPolicy on {args.size}x{args.size} mazes")
    plt.legend()
    plt.tight_layout()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plt.savefig(Path(args.out) / "04_grpo_vs_ppo.png", dpi=100)
    print(f"wrote {args.out}/04_grpo_vs_ppo.png")


if __name__ == "__main__":
    main()

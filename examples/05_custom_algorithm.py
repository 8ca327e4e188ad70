"""Add your own algorithm to the zoo: REINFORCE with a baseline, in one class, and watch it learn.

Teaches the extension point of ``algos``: a ``Config`` dataclass (its fields are the
hyperparameters), one method, ``compute_advantages``, and the ``@algos.register`` decorator. The
shared ``update`` does the rest (batching, the clipped policy-gradient loss, gradient clipping).
On the first pass over a batch the clip ratio is exactly 1 (the log-probs are the rollout's), so
the loss is the plain REINFORCE gradient ``-A_t * grad log pi(a_t | s_t)``; a second pass reuses
the batch, with PPO's clip keeping that step small (one pass learns about 3x slower here)::

    python examples/05_custom_algorithm.py [--updates 30] [--out examples/out]

Trains the small network policy on 7x7 mazes. Writes ``OUT/05_reinforce_curve.png`` (held-out
greedy solve rate vs update, with a random agent's rate) and ``OUT/05_reinforce_solves.gif``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import torch

import algos
from algos.advantages import discounted_returns_to_go
from algos.base import Algorithm, AlgorithmConfig
from algos.net_rollout import play_mazes, sample_mazes, solve_rate
from algos.policies.net import MazeNetPolicy
from mazegym.baselines import random_solve_rate
from mazegym.recording import record_gif

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@dataclass
class ReinforceConfig(AlgorithmConfig):
    """REINFORCE's hyperparameters (plus the shared ones of ``AlgorithmConfig``)."""

    gamma: float = 0.9
    """Discount of the return-to-go that credits each move."""


@algos.register("reinforce")
class Reinforce(Algorithm):
    """REINFORCE (Williams 1992) with a per-move-index batch-mean baseline, scaled by the batch std."""

    Config = ReinforceConfig

    def compute_advantages(self, episodes, values):
        """A_t = G_t - mean of G at move t over the batch, all divided by the std of those differences."""
        returns = [discounted_returns_to_go([t.reward for t in ep.turns], self.config.gamma) for ep in episodes]
        longest = max(len(g) for g in returns)
        padded = torch.full((len(returns), longest), float("nan"))
        for i, g in enumerate(returns):
            padded[i, : len(g)] = g
        baseline = padded.nanmean(dim=0)  # the baseline lowers variance; it must not depend on the action
        advantages = torch.cat([g - baseline[: len(g)] for g in returns])
        return advantages / (advantages.std() + 1e-6), None


def main() -> None:
    """Train with the new algorithm, plot the held-out curve, save one solved maze as a GIF."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=30, help="updates (8 mazes x 8 rollouts each)")
    parser.add_argument("--out", default="examples/out", help="where the PNG and GIF go")
    parser.add_argument("--smoke", action="store_true", help="tiny budget (CI)")
    args = parser.parse_args()
    updates, eval_every, size = (20 if args.smoke else args.updates), 5, 7
    torch.set_num_threads(1)
    torch.manual_seed(0)

    print("registered algorithms:", algos.available())
    policy = MazeNetPolicy(grid_size=size)
    algo = algos.make("reinforce", policy, lr=3e-2, epochs=2, minibatch_size=1024, old_logprobs="rollout")
    held_out, max_moves = sample_mazes(32, size, seed=12345), 2 * size
    random_rate = random_solve_rate(held_out, max_moves)
    curve = [(0, solve_rate(policy, held_out, max_moves=max_moves))]
    for update in range(1, updates + 1):
        mazes = sample_mazes(8, size, seed=1000 + update, exclude={m.maze_id for m in held_out})
        algo.update(
            play_mazes(policy, mazes, group_size=8, max_moves=max_moves, seed=update, env_kwargs={"shaping": True})
        )
        if update % eval_every == 0 or update == updates:
            curve.append((update, solve_rate(policy, held_out, max_moves=max_moves)))
    print(
        f"held-out greedy solve rate: random agent {random_rate:.2f}, before {curve[0][1]:.2f}, "
        f"after {updates} updates {curve[-1][1]:.2f}"
    )

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plt.figure(figsize=(5.5, 3.5))
    plt.plot(*zip(*curve), marker="o", label="REINFORCE + baseline (greedy)")
    plt.axhline(random_rate, color="gray", linestyle="--", label="random legal moves")
    plt.gca().set(xlabel="update (64 episodes each)", ylabel="held-out solve rate", ylim=(-0.02, 1.02))
    plt.legend()
    plt.tight_layout()
    plt.savefig(out / "05_reinforce_curve.png", dpi=100)
    episode = play_mazes(policy, held_out[:1], greedy=True, max_moves=max_moves)[0]
    record_gif(held_out[0], [t.action for t in episode.turns], out / "05_reinforce_solves.gif")
    print(f"wrote {out}/05_reinforce_curve.png and {out}/05_reinforce_solves.gif")


if __name__ == "__main__":
    main()

"""Who gets the credit? GRPO vs GiGPO advantages on the same rollouts, judged by a BFS oracle.

GRPO gives every move of an episode the same advantage: the episode's return against its group.
GiGPO (arXiv:2505.10978) adds a step-level term: moves taken from the *same cell* in different
rollouts of the same maze are compared directly (their discounted returns-to-go, normalised
within that cell's group). This script plays 8 rollouts of a few mazes with an untrained network
policy, labels each move with the oracle (does it bring the agent closer to the goal?), and
prints how well each estimator separates good moves from bad ones -- no training involved::

    python examples/09_credit_assignment.py [--mazes 8] [--seed 0] [--shaping]

With sparse reward most rollouts of a random policy fail, so both estimators see little;
``--shaping`` (potential-based, policy-invariant) gives every move a signal.
"""

from __future__ import annotations

import argparse

import torch

import algos
from algos.net_rollout import play_mazes, sample_mazes
from algos.policies.net import MazeNetPolicy
from runners.rollout.evaluate import oracle_progress


def separation(advantages: torch.Tensor, good: torch.Tensor) -> tuple[float, float, float, float]:
    """Mean advantage of good and of bad moves, the fraction of moves with any credit, and how
    often the sign of that credit agrees with the oracle."""
    credited = advantages != 0
    agree = ((advantages > 0) & (good == 1)) | ((advantages < 0) & (good == 0))
    share = agree[credited].float().mean().item() if credited.any() else float("nan")
    return (
        advantages[good == 1].mean().item(),
        advantages[good == 0].mean().item(),
        credited.float().mean().item(),
        share,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mazes", type=int, default=8, help="maze groups (8 rollouts each)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the policy init and the mazes")
    parser.add_argument("--shaping", action="store_true", help="add potential-based shaping to the sparse reward")
    parser.add_argument("--out", default=None, help="accepted like every example's; this one prints a table only")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    policy = MazeNetPolicy(11)  # 11x11 grid = 5x5 cells
    mazes = sample_mazes(args.mazes, 11, seed=args.seed)
    episodes = play_mazes(
        policy, mazes, group_size=8, max_moves=40, seed=args.seed, env_kwargs={"shaping": args.shaping}
    )
    good = torch.tensor(oracle_progress(episodes, mazes), dtype=torch.float32)  # the oracle's verdict per move
    solved = sum(ep.success for ep in episodes)
    print(
        f"{len(episodes)} rollouts ({solved} solved), {len(good)} moves, {good.mean():.0%} of them good per the oracle"
    )
    print(f"{'estimator':<34}{'adv(good)':>10}{'adv(bad)':>10}{'credited':>10}{'sign right':>12}")
    for label, name, config in [
        ("GRPO (episode return)", "grpo", {}),
        ("GiGPO episode term only (omega=0)", "gigpo", {"step_weight": 0.0, "gamma": 0.9}),
        ("GiGPO (episode + anchor states)", "gigpo", {"gamma": 0.9}),
    ]:
        advantages, _ = algos.make(name, policy, **config).compute_advantages(episodes, None)
        g, b, credited, right = separation(advantages, good)
        print(f"{label:<34}{g:>10.3f}{b:>10.3f}{credited:>10.0%}{right:>12.0%}")


if __name__ == "__main__":
    main()

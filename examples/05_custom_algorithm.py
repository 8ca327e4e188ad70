"""Add an algorithm to the zoo in one file: a typed config, one method, one decorator.

The example implements "REINFORCE with a batch baseline" (LitePPO-style scaling: centre each
episode's return on its group mean, divide by the *batch* std instead of the group std), then
trains the small network policy with it for a few updates::

    python examples/03_custom_algorithm.py
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import algos
from algos.base import Algorithm, AlgorithmConfig
from algos.advantages import grpo_advantages
from algos.net_rollout import play_mazes, sample_mazes, solve_rate
from algos.policies.net import MazeNetPolicy


@dataclass
class BatchStdConfig(AlgorithmConfig):
    """Config of the example algorithm; every field has a docstring so tyro can show it."""

    lr: float = 3e-2
    """Learning rate (the small network policy likes large ones)."""
    epochs: int = 4
    """Passes over each batch."""
    eps: float = 1e-6
    """Added to the batch std before dividing."""


@algos.register("batch_std")
class BatchStd(Algorithm):
    """Group-mean baseline, batch-std scale (Liu et al. 2025, "LitePPO")."""

    Config = BatchStdConfig

    def compute_advantages(self, episodes, values):
        returns = torch.tensor([ep.episode_return for ep in episodes])
        groups = torch.tensor([ep.group_id for ep in episodes])
        centred = grpo_advantages(returns, groups, norm_by_std=False)
        scaled = centred / (returns.std() + self.config.eps) if len(returns) > 1 else centred
        return torch.cat([scaled[i].repeat(len(ep.turns)) for i, ep in enumerate(episodes)]), None


def main(updates: int = 5) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print("registered algorithms:", algos.available())
    policy = MazeNetPolicy(grid_size=11)
    algo = algos.make("batch_std", policy, minibatch_size=1024, old_logprobs="rollout")
    held_out = sample_mazes(20, 11, seed=12345)
    for update in range(1, updates + 1):
        episodes = play_mazes(policy, sample_mazes(8, 11, seed=update), group_size=8, max_moves=40,
                              seed=update, env_kwargs={"shaping": True})
        metrics = algo.update(episodes)
        print(f"update {update}: train success {metrics['success_rate']:.2f}  "
              f"reward var {metrics['reward_var_mean']:.3f}  entropy {metrics['entropy']:.3f}")
    print(f"greedy solve rate on held-out mazes: {solve_rate(policy, held_out, max_moves=40):.2f}")


if __name__ == "__main__":
    main()

"""The language-model RL path moves the right tokens the right way, judged by an independent oracle.

A batch of real multi-turn rollouts of the SFT'd tiny LM is scored by BFS: a move is *correct*
when it brings the agent closer to the goal. Nothing in the trainer sees that label. The tests
check (1) the advantages favour correct moves (GRPO and GiGPO), and (2) a few LoRA updates on
the batch raise the policy-gradient objective ``sum_i A_i * dlogp_i`` measured by a separate
forward pass, while the same updates with the advantages' sign flipped lower it. A mistake
anywhere between rollout and loss -- response positions, the loss mask, the advantage-to-turn
order, the sign -- breaks (2).

What this does *not* show: that the tiny model's updates separate correct from wrong moves
well. Measured while writing it: after 3 updates at lr 3e-4 the reply log-probs of correct
and wrong moves both fell by ~0.012 (correlation of advantage and change ~0.08) -- the 2-layer
model's gradient is dominated by what all turns share, which is why RL lifts it so little.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sft_cache import cached_sft_model

pytestmark = pytest.mark.slow


def _config(algo: str):
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    return apply_overrides(
        get_preset("cpu-tiny"),
        [
            "run_dir=unused",
            f"algo.name={algo}",
            "algo.lr=3e-4",
            "algo.minibatch_size=0",
            "rollout.temperature=1.0",
            "loop.mazes_per_step=8",
            "runner.num_threads=1",
            "logging.progress=false",
        ],
    )


def _oracle_correct(episodes, mazes) -> torch.Tensor:
    """1 per turn whose move strictly lowers the BFS distance to the goal, else 0 (walls, detours, invalid)."""
    from runners.rollout.evaluate import oracle_progress

    return torch.tensor(oracle_progress(episodes, mazes), dtype=torch.float32)


def _reply_logprobs(policy, turns) -> torch.Tensor:
    with torch.no_grad():
        outs = [policy.score_turns(turns[i : i + 256]) for i in range(0, len(turns), 256)]
    return torch.cat([(o.logprobs * o.mask).sum(1) for o in outs])


@pytest.fixture(scope="module")
def batch():
    from mazegym.evalsets import MazeStream
    from runners import build
    from runners.train import steps

    torch.set_num_threads(1)
    cfg = _config("gigpo")
    model = cached_sft_model(250)
    generator = build.build_generator(cfg, Path(model))
    stream = MazeStream(
        size=cfg.maze.size, seed=123, generator=cfg.maze.generator, max_optimal_moves=cfg.rollout.max_moves
    )
    mazes = [next(stream) for _ in range(cfg.loop.mazes_per_step)]
    stream.load_state_dict(
        MazeStream(
            size=cfg.maze.size, seed=123, generator=cfg.maze.generator, max_optimal_moves=cfg.rollout.max_moves
        ).state_dict()
    )
    episodes = steps.generate_step(generator, stream, cfg, step=0)
    return model, mazes, episodes


@pytest.mark.parametrize("algo", ["grpo", "gigpo"])
def test_advantages_favour_the_oracles_moves(batch, algo):
    from runners import build

    model, mazes, episodes = batch
    _, _, algorithm, _ = build.build_training(_config(algo), Path(model))
    correct = _oracle_correct(episodes, mazes)
    assert 0.1 < correct.mean().item() < 0.9, "the batch needs both kinds of moves"
    adv, _ = algorithm.compute_advantages(episodes, None)
    assert adv[correct == 1].mean() > 0.1 > -0.1 > adv[correct == 0].mean()


def _objective_change(model, episodes, flip: bool) -> float:
    """``sum_i A_i * (logp_after_i - logp_before_i)`` over the batch's turns after 3 updates."""
    from runners import build

    _, policy, algorithm, _ = build.build_training(_config("gigpo"), Path(model))
    advantages, _ = algorithm.compute_advantages(episodes, None)
    if flip:
        original = algorithm.compute_advantages
        algorithm.compute_advantages = lambda eps, values: (-original(eps, values)[0], None)
    turns = [t for ep in episodes for t in ep.turns]
    before = _reply_logprobs(policy, turns)
    for _ in range(3):
        metrics = algorithm.update(episodes)
        assert np.isfinite(metrics["loss"])
    change = _reply_logprobs(policy, turns) - before
    assert change.abs().mean() > 1e-3, "the updates did not change the policy"
    return float((advantages.double() * change.double()).sum())


def test_lora_updates_climb_the_policy_gradient_objective_and_flipped_ones_descend(batch):
    model, _, episodes = batch
    assert _objective_change(model, episodes, flip=False) > 0 > _objective_change(model, episodes, flip=True)

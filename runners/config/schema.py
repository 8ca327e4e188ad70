"""The typed configuration of a training run: the settings every run has, and a section for each part it chose.

A :class:`TrainConfig` holds a run's settings. The generic sections here are what every run has; each part a run
chooses owns its section and declares it beside itself: the model kind (``model``: :class:`runners.models.ModelSpec`
``.settings``), the collector (``rollout.collector``: :class:`runners.rollout.collectors.Collector` ``.settings``),
the algorithm (``algo.<field>``: ``algos.config_class(name)``), the engine (``engine``:
:mod:`runners.rollout.generation.engines`) and the runner (``runner``: :mod:`runners.config.runner`). Each field
carries a docstring (the help of ``mazegym <cmd> --help``, read by :func:`runners.config.overrides.field_docs`) and
its one check as metadata: ``{"range": (low, high, low excluded)}``, ``{"choices": (...)}``, ``{"check": fn}``
(``fn(value)`` returns the problem or None) or ``{"any": True}`` (any value of its type).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from algos.lora import LoRAConfig
from mazegym.evalsets import EVAL_SETS
from mazegym.maze import GENERATORS
from runners import models
from runners.config.runner import LocalRunnerConfig, RunnerConfig
from runners.models import ModelConfig
from runners.rollout.collect import RolloutConfig
from runners.rollout.generation.engines import EngineConfig, HFEngineConfig

CONFIG_VERSION = 2
"""The layout of a saved config (``config.json``, a checkpoint's ``state.json``): 2 gives each chosen part its own
section; 1 (no ``config_version``) is the flat layout before it, read through :mod:`runners.config.migrate`."""

SEED = (0, 2**31 - 1, False)
"""The range of every seed."""
COUNT = (0, 10_000_000, False)
"""The range of step counts and budgets (0 allowed)."""


class ConfigError(ValueError):
    """A configuration problem, with a message that says what to fix."""


def _odd_size(size: int) -> str | None:
    return None if size % 2 and 5 <= size <= 1001 else "must be odd and >= 5 (a grid of cells and walls)"


def _eval_set(name: str) -> str | None:
    return None if name in EVAL_SETS else f"does not exist; choose one of {', '.join(sorted(EVAL_SETS))}"


def _eval_sets(names: list[str]) -> str | None:
    unknown = [name for name in names if name not in EVAL_SETS]
    return f"names no eval set {unknown[0]!r}; choose from {', '.join(sorted(EVAL_SETS))}" if unknown else None


def _set_mazes(counts: dict[str, int]) -> str | None:
    for name, count in counts.items():
        if name not in EVAL_SETS:
            return f"names {name!r}, which is not an eval set; choose from {', '.join(sorted(EVAL_SETS))}"
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            return f"[{name!r}]={count!r} must be a whole number of mazes >= 1"
    return None


def _resume(value: str) -> str | None:
    if value in ("auto", "latest", "none") or Path(value).exists():
        return None
    return "is no such checkpoint; use auto, latest, none or an existing checkpoint path"


def _registered_algorithm(name: str) -> str | None:
    import algos

    if name in algos.available():
        return None
    return (
        f"is not a registered algorithm; choose one of {', '.join(algos.available())} "
        "(one of your own: load the file that registers it with --plugin FILE.py)"
    )


SINKS = ("wandb", "mlflow")
"""Metric sinks besides TensorBoard and JSONL."""


def _sinks(sinks: dict[str, str]) -> str | None:
    unknown = [name for name in sinks if name not in SINKS]
    if unknown:
        return f"names {unknown[0]!r}; choose from {', '.join(SINKS)}"
    empty = [name for name, project in sinks.items() if not str(project).strip()]
    return f"gives {empty[0]} no project name" if empty else None


def _not_empty(text: str) -> str | None:
    return None if text.strip() else "is empty: name the directory the run writes to"


@dataclass
class MazeConfig:
    """Which mazes are trained on and evaluated on."""

    size: int = field(default=7, metadata={"check": _odd_size})
    """Grid side, outer walls included (odd, >= 5). VisMaze-v0 is 9."""
    eval_set: str = field(default="heldout-7x7", metadata={"check": _eval_set})
    """The fixed 64-maze evaluation set of the case-study table (mazegym.evalsets.EVAL_SETS); its size must equal
    `size`.
    """
    heldout_sets: list[str] = field(default_factory=list, metadata={"check": _eval_sets})
    """Extra fixed sets evaluated at the end (e.g. VisMaze-v0); they may have other sizes."""
    generator: str = field(default="wilson", metadata={"choices": tuple(GENERATORS)})
    """Maze generator of the training stream (wilson, dfs, kruskal, prim)."""
    stream_seed: int = field(default=0, metadata={"range": SEED})
    """Seed of the RL training maze stream (SFT uses stream_seed + 1); evaluation mazes are always skipped."""
    rl_shapes: list[dict[str, Any]] = field(default_factory=list, metadata={"any": True})
    """Kinds of mazes the RL stream mixes, one drawn per maze (each sets any of size, generator, extra_openings,
    start_goal; e.g. [{}, {extra_openings: 0.3}, {start_goal: random}, {size: 13}]); empty: perfect mazes of
    `generator`. A maze of another size than maze.size plays with that size's registered move limit (50 at 13x13).
    Supervision (SFT, vision pretraining) always reads perfect mazes from corner to corner; the maze stream checks
    them."""


@dataclass
class AlgoConfig:
    """The RL algorithm: any name from algos.available(), with its own hyperparameters."""

    name: str = field(default="grpo", metadata={"check": _registered_algorithm})
    """Registered algorithm (grpo, dr_grpo, dapo, rloo, gigpo, ppo; ppo adds a value head to the policy)."""
    params: dict[str, Any] = field(default_factory=dict, metadata={"algorithm": True})
    """Overrides of the algorithm's config fields (set them as algo.<field>=value, e.g. algo.lr=1e-4); the
    algorithm's config class checks them (algos.config_class(name)).
    """


@dataclass
class SFTConfig:
    """Supervised fine-tuning on BFS-oracle demonstrations (the stage before RL)."""

    enabled: str = field(default="auto", metadata={"choices": ("auto", "always", "never")})
    """"auto": run SFT when no SFT checkpoint exists in <run_dir>/sft; "always": retrain; "never": start RL from the
    base model.
    """
    mode: str = field(default="full", metadata={"choices": ("full", "lora")})
    """"full" trains every weight (tiny models from scratch); "lora" trains the LoRA adapter (pretrained models)."""
    steps: int = field(default=300, metadata={"range": COUNT})
    """Optimizer steps: the data budget (steps x batch_size demonstration moves). Fewer steps = weaker SFT start."""
    batch_size: int = field(default=64, metadata={"range": (1, 1_000_000, False)})
    """Demonstration moves (turns) per step."""
    lr: float = field(default=1e-3, metadata={"range": (0.0, None, True)})
    """Peak AdamW learning rate (linear warmup, cosine decay to 10%)."""
    detours: int = field(default=0, metadata={"range": (0, 10_000, False)})
    """Exploratory back-and-forth pairs inserted into each demonstration (VisGym's padded solver); 0 = shortest paths.
    """
    random_starts: float = field(default=0.0, metadata={"range": (0.0, 1.0, False)})
    """Fraction of demonstrations that start from a random open cell instead of the maze's start, so SFT also shows the
    moves at cells off the shortest path (the cells RL rollouts visit).
    """
    seed: int = field(default=0, metadata={"range": SEED})
    """Seed of model init order, batching and detours (and of the tiny model's weights)."""
    checkpoint: str = field(default="", metadata={"any": True})
    """Use this SFT checkpoint (a model dir, an adapter dir in lora mode, or another run's finished ``sft`` dir)
    instead of <run_dir>/sft/model."""


@dataclass
class LoopConfig:
    """The RL step loop."""

    steps: int = field(default=60, metadata={"range": COUNT})
    """RL steps (one step = generate -> score -> update -> sync -> [eval] -> [checkpoint])."""
    mazes_per_step: int = field(default=8, metadata={"range": (1, 100_000, False)})
    """Maze groups per step; each is played rollout.group_size times."""
    seed: int = field(default=0, metadata={"range": SEED})
    """Seed of sampling, torch and numpy RNGs (saved and restored by checkpoints)."""
    parity_every: int = field(default=0, metadata={"range": COUNT})
    """Check sampler/trainer log-prob parity after every N-th sync (0 = never)."""
    max_minutes: float = field(default=0.0, metadata={"range": (0.0, None, False)})
    """A safety net, not a budget: stop RL early (with a final checkpoint and eval) after this many minutes, and say so
    in the first line of the final table; 0 = no limit. ``loop.steps`` is what decides a run's result.
    """
    max_env_turns: int = field(default=0, metadata={"range": (0, 10**15, False)})
    """A budget of environment turns: end RL after the step on which the run's turns (``rollout/env_turns``, the
    states at which the policy was asked for a move) reach this many, with the final checkpoint and evaluation as at
    ``loop.steps``; 0 = no budget. Benchmark tracks set it so that every algorithm gets the same experience.
    """
    overlap_generation: bool = field(default=False, metadata={"any": True})
    """One-step off-policy: collect step t+1's rollouts with the weights of step t-1 while step t's update runs (the
    local runner does both at once on two cores; the Ray runner does them one after the other, with the same data).
    Never across a checkpoint step: the step after a checkpoint is collected on-policy, so a resumed run replays the
    uninterrupted one exactly. Needs a collector that leaves torch's random generator alone.
    """


@dataclass
class EvalConfig:
    """Evaluation during and after training."""

    every: int = field(default=10, metadata={"range": COUNT})
    """Evaluate on the fixed set every N RL steps (0 = only before and after RL)."""
    temperature: float = field(default=0.0, metadata={"range": (0.0, None, False)})
    """Decoding temperature for evaluation (0 = greedy, the default)."""
    before_rl: bool = field(default=True, metadata={"any": True})
    """Evaluate the SFT start before the first RL step (the "before" row of the table)."""
    set_mazes: dict[str, int] = field(default_factory=dict, metadata={"check": _set_mazes})
    """Play only the first N mazes of these eval sets (set name -> N, e.g. ``{heldout-21x21: 32}``): a cheaper look at
    large mazes, whose moves cost more; every other set is played whole. The tables say how many were played.
    """


@dataclass
class CheckpointConfig:
    """Checkpoints: weights, optimizer, scheduler, RNG states, maze stream, step, config."""

    every: int = field(default=10, metadata={"range": COUNT})
    """Write a checkpoint every N RL steps (and always at the end); 0 = only at the end."""
    keep: int = field(default=3, metadata={"range": (1, 1_000_000, False)})
    """Keep the newest K checkpoints (older ones are deleted)."""
    resume: str = field(default="auto", metadata={"check": _resume})
    """"auto" (latest when the run dir has checkpoints, else fresh), "latest", "none", or a checkpoint path."""


@dataclass
class LoggingConfig:
    """Where metrics go. TensorBoard and JSONL are always written to <run_dir>."""

    sinks: dict[str, str] = field(default_factory=dict, metadata={"check": _sinks})
    """Also log to these, each with its project name: "wandb" (Weights & Biases: the project) and/or "mlflow" (the
    experiment), e.g. ``{wandb: mazegym}``; each needs its package installed."""
    progress: bool = field(default=True, metadata={"any": True})
    """Show a progress bar with ETA and the current solve rate."""
    calibration_seconds: float = field(default=1.0, metadata={"range": (0.0, 60.0, False)})
    """Measure the machine for about this long at the start of ``mazegym train`` (recorded in run_info.json beside the
    run's steps/s, so a slow machine can be told from a regression); 0 = skip.
    """


def _default_model() -> ModelConfig:
    return models.settings_for("text")


@dataclass
class TrainConfig:
    """A whole run: SFT then RL, evaluation, checkpoints and metrics."""

    run_dir: str = field(default="runs/default", metadata={"check": _not_empty})
    """Directory of this run: checkpoints, metrics, SFT model, evaluation results."""
    preset: str = field(default="", metadata={"provenance": True})
    """The preset the config was resolved from (chosen with --preset; empty: the schema's defaults). Not a setting:
    a config file or override cannot change it."""
    model: ModelConfig = field(default_factory=_default_model)
    """Model to train: its kind and the kind's own settings."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """LoRA adapter."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """How episodes are played and sampled, and the collector of the training episodes."""
    maze: MazeConfig = field(default_factory=MazeConfig)
    """Training and evaluation mazes."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """RL algorithm."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Supervised stage."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """RL step loop."""
    engine: EngineConfig = field(default_factory=HFEngineConfig)
    """Generation engine and its own settings."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints and resume."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Metrics sinks."""
    runner: RunnerConfig = field(default_factory=LocalRunnerConfig)
    """Local or Ray runner and its own settings."""

"""The typed configuration of a training run: one dataclass per concern, a help docstring under every field.

A :class:`TrainConfig` holds every setting of a run. The help text shown by ``mazegym <cmd> --help`` is
read from the docstrings under the fields (:func:`runners.config.overrides.field_docs`), so code and
documentation cannot drift apart. Algorithm hyperparameters live in ``algo.params`` and are checked
against the chosen algorithm's own config class (``algos.config_class(name)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from algos.lora import LoRAConfig
from runners.rollout.collect import RolloutConfig


class ConfigError(ValueError):
    """A configuration problem, with a message that says what to fix."""


@dataclass
class ModelConfig:
    """Which model to train."""

    path: str = ""
    """Local directory of a Hugging Face model (config.json, weights, tokenizer). Empty: build the tiny model named by
    `tiny` into <run_dir>/base_model.
    """
    tiny: str = "text"
    """Tiny model to build when `path` is empty: "maze-vlm" (recurrent-conv vision encoder -> projector -> Qwen2
    decoder, image observations), "text" (Qwen2 LM, ASCII observations) or "vlm" (Qwen2-VL, image observations).
    """
    tiny_layers: int = 2
    """Decoder layers of the tiny model."""
    tiny_hidden: int = 128
    """Hidden size of the tiny model (a multiple of 64: head_dim is 64)."""
    vision_width: int = 32
    """Tiny maze-vlm only: channels of the recurrent conv vision encoder."""
    vision_iterations: int = 20
    """Tiny maze-vlm only: iterations of the recurrent conv block when the model is built (evaluation scales it with
    the maze's size, eval.scale_vision_iterations, or fixes it, eval.vision_iterations).
    """
    vision_tokens: str = "cells"
    """Tiny maze-vlm only: the vision tokens an image gives the decoder: "cells" (one per maze cell, so the prompt
    grows with the maze) or "agent" (one token pooled at the agent's cell, the same on a maze of any size).
    """
    vision_state: str = "residual"
    """Tiny maze-vlm only: how the recurrent block updates its state: "residual" (relu(state + conv(...)),
    unbounded; it degrades when run far past its training depth) or "gated" (a convex mix of the state and a tanh
    candidate, weighted by a learned per-cell gate, as a convolutional GRU: bounded, so more iterations at test
    time keep improving the routing instead of blowing it up).
    """
    vision_grad_iterations: int = 0
    """Tiny maze-vlm only: RL's backward pass runs through the last this-many iterations of the recurrent block; the
    earlier ones run without gradient (as in Bansal et al.'s progressive training), which makes an update's backward
    pass several times cheaper. 0 = all iterations.
    """
    vision_update_iterations: list[int] = field(default_factory=list)
    """Tiny maze-vlm only, for RL that trains the encoder (lora.modules_to_save holds vision_tower): [low, high] makes
    each update's forward pass run the recurrent block a count drawn from that range, as vision pretraining's random
    depths do (rollouts, old log-probs and evaluation keep vision_iterations); [] = vision_iterations always.
    """
    vision_patch_px: int = 5
    """Tiny maze-vlm only: each maze cell is downsampled to this many pixels per side before the patch embedding."""
    vision_locator: str = "learned"
    """Tiny maze-vlm only: how the encoder finds the agent's cell, where its vision token is pooled: "learned" (a
    saliency read from each cell's pixels, which SFT's localisation loss teaches) or "colour" (a fixed match of each
    cell's pixels against the colour the env draws the agent in: a prior built into the model, no label).
    """
    task_tokens: bool = True
    """Tiny models only: give the fixed prompt phrases (system prompt, per-turn phrases) one token each, so a turn is
    ~100 tokens instead of ~530 bytes.
    """
    image_cell_px: int = 28
    """Tiny VLM only: pixels per maze cell in the image, and the image budget is set so that one cell is exactly one
    merged vision token (28 px = 2x2 patches of 14 px).
    """
    dtype: str = "float32"
    """Weights dtype for training and HF generation: float32, bfloat16 or float16."""
    device: str = "cpu"
    """Torch device of the local runner ("cpu" or "cuda")."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (the trainer's
    policy, set before FSDP shards it): far less activation memory for a slower update. Long multi-image histories
    on an 8B model need it; pair it with algo.micro_batch_tokens to bound each micro-batch's size.
    """


@dataclass
class MazeConfig:
    """Which mazes are trained on and evaluated on."""

    size: int = 7
    """Grid side, outer walls included (odd, >= 5). VisMaze-v0 is 9."""
    eval_set: str = "heldout-7x7"
    """The fixed 64-maze evaluation set of the case-study table (mazegym.evalsets.EVAL_SETS); its size must equal
    `size`.
    """
    heldout_sets: list[str] = field(default_factory=list)
    """Extra fixed sets evaluated at the end (e.g. VisMaze-v0); they may have other sizes."""
    generator: str = "wilson"
    """Maze generator of the training stream (wilson, dfs, kruskal, prim)."""
    stream_seed: int = 0
    """Seed of the RL training maze stream (SFT uses stream_seed + 1); evaluation mazes are always skipped."""
    rl_shapes: list[dict[str, Any]] = field(default_factory=list)
    """Kinds of mazes the RL stream mixes, one drawn per maze (each sets any of generator, extra_openings,
    start_goal; e.g. [{}, {extra_openings: 0.3}, {start_goal: random}]); empty: perfect mazes of `generator`.
    Supervision (SFT, vision pretraining) always reads perfect mazes from corner to corner."""


@dataclass
class AlgoConfig:
    """The RL algorithm: any name from algos.available(), with its own hyperparameters."""

    name: str = "grpo"
    """Registered algorithm (grpo, dr_grpo, dapo, rloo, gigpo, ppo; ppo adds a value head to the policy)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Overrides of the algorithm's config fields (set them as algo.<field>=value, e.g. algo.lr=1e-4); checked against
    algos.config_class(name).
    """


@dataclass
class SFTConfig:
    """Supervised fine-tuning on BFS-oracle demonstrations (the stage before RL)."""

    enabled: str = "auto"
    """"auto": run SFT when no SFT checkpoint exists in <run_dir>/sft; "always": retrain; "never": start RL from the
    base model.
    """
    mode: str = "full"
    """"full" trains every weight (tiny models from scratch); "lora" trains the LoRA adapter (pretrained models)."""
    steps: int = 300
    """Optimizer steps: the data budget (steps x batch_size demonstration moves). Fewer steps = weaker SFT start."""
    batch_size: int = 64
    """Demonstration moves (turns) per step."""
    lr: float = 1e-3
    """Peak AdamW learning rate (linear warmup, cosine decay to 10%)."""
    detours: int = 0
    """Exploratory back-and-forth pairs inserted into each demonstration (VisGym's padded solver); 0 = shortest paths.
    """
    random_starts: float = 0.0
    """Fraction of demonstrations that start from a random open cell instead of the maze's start, so SFT also shows the
    moves at cells off the shortest path (the cells RL rollouts visit).
    """
    vision_steps: int = 0
    """Vision-encoder pretraining steps before the SFT steps (models with a vision pretraining objective: MazeVLM): the
    encoder alone learns the oracle's move at the agent's cell, one random open cell of each fresh maze (the
    demonstration budget is vision_steps x vision_batch_size + steps x batch_size moves). 0 = none.
    """
    vision_batch_size: int = 0
    """Cells per vision pretraining batch (0 = ``batch_size``). For the same number of cells, more and smaller batches
    teach the encoder a routing rule that holds on larger mazes more often (docs/research.md)."""
    vision_lr: float = 2e-3
    """Constant AdamW learning rate of vision pretraining."""
    vision_iterations: list[int] = field(default_factory=list)
    """``[low, high]``: each vision pretraining batch runs the recurrent encoder a random number of iterations in
    that range (inclusive), so the recurrence learns to reach and then hold its answer at any depth, not only at
    ``model.vision_iterations`` (random depths, as in Bansal et al. 2022); ``[]`` = the model's own fixed count.
    """
    vision_path_weight: float = 0.0
    """Weight of vision pretraining's path loss: at every cell, is it on the shortest path from the agent to the goal
    (a target at every cell, not one move per maze; MazeVLM's ``path_head``). 0 = the move and localisation losses
    only."""
    seed: int = 0
    """Seed of model init order, batching and detours."""
    freeze_vision: bool = True
    """Full mode on a VLM: keep the vision encoder frozen (its merger still trains); much cheaper on CPU."""
    localization_weight: float = 1.0
    """Weight of the agent-localisation loss of models that have one (MazeVLM's agent context: cross-entropy of its
    agent scores against the agent's cell); other models ignore it.
    """
    checkpoint: str = ""
    """Use this SFT checkpoint (a model dir, or an adapter dir in lora mode) instead of <run_dir>/sft/model."""


@dataclass
class LoopConfig:
    """The RL step loop."""

    steps: int = 60
    """RL steps (one step = generate -> score -> update -> sync -> [eval] -> [checkpoint])."""
    mazes_per_step: int = 8
    """Maze groups per step; each is played rollout.group_size times."""
    seed: int = 0
    """Seed of sampling, torch and numpy RNGs (saved and restored by checkpoints)."""
    num_threads: int = 1
    """torch intra-op threads on CPU (1 is fastest on a shared 2-core machine); 0 = torch's default."""
    engine: str = "hf"
    """Generation engine: "hf" (transformers; bitwise-reproducible on CPU) or "vllm"."""
    parity_every: int = 0
    """Check sampler/trainer log-prob parity after every N-th sync (0 = never)."""
    max_minutes: float = 0.0
    """A safety net, not a budget: stop RL early (with a final checkpoint and eval) after this many minutes, and say so
    in the first line of the final table; 0 = no limit. ``loop.steps`` is what decides a run's result.
    """
    max_env_turns: int = 0
    """A budget of environment turns: end RL after the step on which the run's turns (``rollout/env_turns``, the
    states at which the policy was asked for a move) reach this many, with the final checkpoint and evaluation as at
    ``loop.steps``; 0 = no budget. Benchmark tracks set it so that every algorithm gets the same experience.
    """
    update_threads: int = 1
    """Local runner on CPU: run the update's micro-batches on this many copies of the policy, one thread each
    (:class:`algos.parallel.ThreadReplicas`), and the SFT stage's batches the same way; unlike ``num_threads`` it does
    not slow down when another program holds a core. The Ray runner parallelises over ``runner.num_workers`` instead
    (set 1 there).
    """
    rollout_threads: int = 1
    """``hf`` engine: play a step's mazes and each evaluation on this many threads that share the generator, each a
    contiguous slice of the mazes (the result is the same as on one thread). Branch scoring and greedy evaluation use
    them; sampled plays run on one thread (they seed torch's global generator per turn), and so does the ``vllm``
    engine, which batches on its own.
    """
    overlap_generation: bool = False
    """One-step off-policy: collect step t+1's rollouts with the weights of step t-1 while step t's update runs (the
    local runner does both at once on two cores; the Ray runner does them one after the other, with the same data).
    Never across a checkpoint step: the step after a checkpoint is collected on-policy, so a resumed run replays the
    uninterrupted one exactly.
    """


@dataclass
class EvalConfig:
    """Evaluation during and after training."""

    every: int = 10
    """Evaluate on the fixed set every N RL steps (0 = only before and after RL)."""
    temperature: float = 0.0
    """Decoding temperature for evaluation (0 = greedy, the default)."""
    before_rl: bool = True
    """Evaluate the SFT start before the first RL step (the "before" row of the table)."""
    scale_vision_iterations: bool = True
    """Models with a recurrent vision encoder (MazeVLM): on sets of larger mazes than maze.size, run ceil(iterations x
    (set size / maze.size)^2) encoder iterations (no retraining: 30 on 11x11, 42 on 13x13, 109 on 21x21 for a model
    trained at 20 on 9x9).
    """
    vision_iterations: int = 0
    """Models with a recurrent vision encoder: run this many encoder iterations on every evaluated set instead
    (test-time compute: more iterations for larger mazes; `benchmarks/extrapolation.py --iterations` sweeps it);
    0 = the model's own count, scaled as above.
    """
    set_mazes: dict[str, int] = field(default_factory=dict)
    """Play only the first N mazes of these eval sets (set name -> N, e.g. ``{heldout-21x21: 32}``): a cheaper look at
    large mazes, whose moves cost more; every other set is played whole. The tables say how many were played.
    """


@dataclass
class CheckpointConfig:
    """Checkpoints: weights, optimizer, scheduler, RNG states, maze stream, step, config."""

    every: int = 10
    """Write a checkpoint every N RL steps (and always at the end); 0 = only at the end."""
    keep: int = 3
    """Keep the newest K checkpoints (older ones are deleted)."""
    resume: str = "auto"
    """"auto" (latest when the run dir has checkpoints, else fresh), "latest", "none", or a checkpoint path."""


@dataclass
class LoggingConfig:
    """Where metrics go. TensorBoard and JSONL are always written to <run_dir>."""

    wandb: bool = False
    """Also log to Weights & Biases (needs `wandb` installed)."""
    mlflow: bool = False
    """Also log to MLflow (needs `mlflow` installed)."""
    project: str = "mazegym"
    """Project / experiment name for W&B and MLflow."""
    progress: bool = True
    """Show a progress bar with ETA and the current solve rate."""
    calibration_seconds: float = 1.0
    """Measure the machine for about this long at the start of ``mazegym train`` (recorded in run_info.json beside the
    run's steps/s, so a slow machine can be told from a regression); 0 = skip.
    """


@dataclass
class RaySettings:
    """Placement and fault tolerance of the Ray runner (``runner.kind=ray``)."""

    address: str | None = None
    """Ray cluster to join ("auto": the cluster this process runs in, e.g. inside a Ray job; "ray://host:10001"
    or "host:6379": that cluster); None: $RAY_ADDRESS when set, else a new Ray instance on this machine."""
    cpus_per_worker: float = 1.0
    """CPUs reserved by each worker's placement-group bundle."""
    placement_strategy: str = "PACK"
    """Placement-group strategy: PACK (fill nodes first), SPREAD, STRICT_PACK or STRICT_SPREAD."""
    dist_backend: str = "auto"
    """torch.distributed backend of the training ranks: auto (nccl with GPUs, gloo otherwise), gloo or nccl."""
    max_restarts: int = 3
    """Rebuild the worker group after a worker dies at most this many times (0 = fail at once)."""
    collective_timeout_s: float = 600.0
    """A collective waiting longer than this fails (a hung peer becomes an error and a restart)."""
    worker_threads: int = 1
    """torch intra-op threads per worker (OMP_NUM_THREADS inside the actor)."""
    export_metrics: bool = True
    """Also export training metrics through ray.util.metrics (Prometheus / Grafana)."""
    sleep_engine_during_update: bool = True
    """GPU + vLLM: put the engine to sleep while the trainer updates, wake it for the sync."""


@dataclass
class RunnerConfig:
    """Where the step loop runs."""

    kind: str = "local"
    """"local" (this process) or "ray" (runners.distributed.ray_runner: placement and transport over a Ray cluster)."""
    num_gpus: int = 0
    """GPUs the run needs in total (checked by --dry-run against what is visible); the Ray runner splits them
    evenly over its workers."""
    num_workers: int = 1
    """Rollout+train workers (Ray runner); each holds one generation engine and one training rank."""
    vllm_gpu_memory_utilization: float = 0.5
    """Fraction of each GPU vLLM may use for weights and KV cache when colocated with training."""
    ray: RaySettings = field(default_factory=RaySettings)
    """Ray runner settings."""


@dataclass
class TrainConfig:
    """A whole run: SFT then RL, evaluation, checkpoints and metrics."""

    run_dir: str = "runs/cpu-tiny"
    """Directory of this run: checkpoints, metrics, SFT model, evaluation results."""
    preset: str = "cpu-tiny"
    """Preset this config started from (informational; set by --preset)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    """Model to train."""
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    """LoRA adapter."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """How episodes are played and sampled (runners.rollout.collect.RolloutConfig)."""
    maze: MazeConfig = field(default_factory=MazeConfig)
    """Training and evaluation mazes."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """RL algorithm."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Supervised stage."""
    loop: LoopConfig = field(default_factory=LoopConfig)
    """RL step loop."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints and resume."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Metrics sinks."""
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    """Local or Ray runner."""
    scheme_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Settings for each rollout scheme (``episodes``, ``branching``) other than the preset's own, nested like the
    config (``{episodes: {rollout: {temperature: 0.3}}}``): applied when a run moves to that scheme (its algorithm
    trains only there, or rollout.branching was set), except keys the user sets."""

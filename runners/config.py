"""Typed configuration of a training run: one dataclass per concern, a help docstring under every field.

A :class:`TrainConfig` is built from a named preset (:mod:`runners.presets`), then optional
config files (YAML or JSON, nested like the dataclasses), then dotted command-line overrides
(``rollout.group_size=8``), in that order. :func:`apply_overrides` checks every key against
the dataclass fields and converts every value to the field's type, so a typo or a bad value
fails before any work starts, with a message saying what to fix. Algorithm hyperparameters
live in ``algo.params`` and are checked against the chosen algorithm's own config class
(``algos.config_class(name)``), so ``algo.lr=1e-4`` or ``algo.clip_eps_high=0.28`` work for
every registered algorithm.

The help text of :func:`describe_fields` (shown by ``mazegym <cmd> --help``) is read from the
docstrings under the fields, so code and documentation cannot drift apart.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from algos.lora import LoRAConfig
from runners.rollout import RolloutConfig


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
    """Tiny maze-vlm only: iterations of the recurrent conv block when the model is built (raise it at inference for
    larger mazes with eval.vision_iterations).
    """
    vision_patch_px: int = 5
    """Tiny maze-vlm only: each maze cell is downsampled to this many pixels per side before the patch embedding."""
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


@dataclass
class AlgoConfig:
    """The RL algorithm: any name from algos.available(), with its own hyperparameters."""

    name: str = "grpo"
    """Registered algorithm (grpo, dr_grpo, dapo, rloo, gigpo, ppo; ppo adds a value head to the policy)."""
    params: dict[str, Any] = field(default_factory=dict)
    """Overrides of the algorithm's config fields (set them as algo.<field>=value, e.g. algo.lr=1e-4); checked against
    algos.config_class(name).
    """
    episode_mean: bool = True
    """Weight every episode equally in the loss (each turn's advantage x mean turns / its episode's turns); passed to
    the algorithm's own episode_mean. Without it, long failed episodes outweigh short successes and GRPO pushes down
    the common correct moves.
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
    encoder alone learns the demonstrated move from its agent context and the agent's cell, on the same
    demonstration stream (the demonstration budget is (vision_steps + steps) x batch_size moves). 0 = none.
    """
    vision_lr: float = 2e-3
    """Constant AdamW learning rate of vision pretraining."""
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
    backend: str = "hf"
    """Generation backend: "hf" (transformers; bitwise-reproducible on CPU) or "vllm"."""
    parity_every: int = 0
    """Check sampler/trainer log-prob parity after every N-th sync (0 = never)."""
    max_minutes: float = 0.0
    """Stop RL early (with a final checkpoint and eval) after this many minutes; 0 = no limit."""


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
    set size / maze.size) encoder iterations (no retraining).
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


@dataclass
class RunnerConfig:
    """Where the step loop runs."""

    kind: str = "local"
    """"local" (this process) or "ray" (runners.ray_runner: placement and transport over a Ray cluster)."""
    num_gpus: int = 0
    """GPUs the run needs in total (checked by --dry-run against what is visible)."""
    num_workers: int = 1
    """Rollout+train workers (Ray runner); each holds one generation engine and one training rank."""
    vllm_gpu_memory_utilization: float = 0.5
    """Fraction of each GPU vLLM may use for weights and KV cache when colocated with training."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra runner-specific settings (passed through to the Ray runner)."""


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
    """How episodes are played and sampled (runners.rollout.RolloutConfig)."""
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


# --------------------------------------------------------------------------- field docs
@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Docstrings written under each field of dataclass ``cls`` (what tyro shows as help)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if (
                    isinstance(nxt, ast.Expr)
                    and isinstance(getattr(nxt, "value", None), ast.Constant)
                    and isinstance(nxt.value.value, str)
                ):
                    docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def describe_fields(config: Any, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, current value, help) for every leaf field of a config, for --help and --dry-run."""
    rows = []
    docs = field_docs(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            rows += describe_fields(value, key + ".")
        else:
            rows.append((key, json.dumps(value, default=str), docs.get(f.name, "")))
    return rows


# --------------------------------------------------------------------------- overrides
def _resolve_type(cls: type, name: str) -> Any:
    hints = typing.get_type_hints(cls)
    return hints[name]


def coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert ``value`` (a string from the command line, or a parsed YAML/JSON value) to type ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{key}: cannot parse {value!r}")
    if tp is Any:
        return _parse_literal(value) if isinstance(value, str) else value
    if origin in (list, tuple):
        if isinstance(value, str):
            text = value.strip()
            items = (
                _parse_literal(text) if text.startswith("[") else ([v for v in text.split(",") if v] if text else [])
            )
        else:
            items = value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{key}: expected a list (e.g. a,b or [a, b]), got {value!r}")
        inner = args[0] if args else Any
        return [coerce(v, inner, key) for v in items]
    if origin is dict or tp is dict:
        parsed = _parse_literal(value) if isinstance(value, str) else value
        if not isinstance(parsed, dict):
            raise ConfigError(f"{key}: expected a mapping (JSON object), got {value!r}")
        return dict(parsed)
    if tp is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            if tp is int:
                number = float(value)
                if not number.is_integer():
                    raise ValueError
                return int(number)
            return float(value)
        except (TypeError, ValueError):
            kind = "an integer" if tp is int else "a number"
            raise ConfigError(f"{key}: expected {kind}, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    return value


def _parse_literal(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _suggest(name: str, valid: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def set_value(config: Any, dotted: str, value: Any) -> None:
    """Set ``config.<dotted>`` to ``value`` (converted to the field's type); unknown keys fail."""
    parts = dotted.split(".")
    node = config
    for i, part in enumerate(parts):
        path = ".".join(parts[: i + 1])
        if isinstance(node, AlgoConfig) and part not in _ALGO_OWN:
            _set_algo_param(node, ".".join(parts[i:]), value)
            return
        if isinstance(node, AlgoConfig) and part == "params" and i < len(parts) - 1:
            _set_algo_param(node, ".".join(parts[i + 1 :]), value)
            return
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            raise ConfigError(
                f"unknown config key {path!r}{_suggest(part, names)}; valid keys here: {', '.join(names)}"
            )
        if i == len(parts) - 1:
            current = getattr(node, part)
            if dataclasses.is_dataclass(current):
                if not isinstance(value, dict):
                    raise ConfigError(
                        f"{path} is a section; set one of its keys, e.g. "
                        f"{path}.{dataclasses.fields(current)[0].name}=..."
                    )
                for k, v in value.items():
                    set_value(current, k, v)
                return
            setattr(node, part, coerce(value, _resolve_type(type(node), part), path))
            return
        node = getattr(node, part)
        if not dataclasses.is_dataclass(node):
            raise ConfigError(f"{path} is not a section; {dotted!r} goes too deep")


_ALGO_OWN = ("name", "params", "episode_mean")


def _set_algo_param(algo: AlgoConfig, name: str, value: Any) -> None:
    import algos

    cls = algos.config_class(algo.name)
    valid = [f.name for f in dataclasses.fields(cls)]
    if name not in valid:
        raise ConfigError(
            f"unknown key algo.{name} for algorithm {algo.name!r}{_suggest(name, valid)}; valid: {', '.join(valid)}"
        )
    algo.params[name] = coerce(value, _resolve_type(cls, name), f"algo.{name}")


def _served_through_prompt_embeds(config: TrainConfig) -> bool:
    """True when vLLM would serve the configured model through prompt embeddings (MazeVLM: the tiny one or a local
    dir).
    """
    if not config.model.path:
        return config.model.tiny == "maze-vlm"
    from runners.generation.vision_embeds import needs_prompt_embeds

    try:
        return needs_prompt_embeds(Path(config.model.path).expanduser())
    except (OSError, ValueError):
        return False


def apply_overrides(config: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply ``key=value`` strings in order (e.g. ``rollout.group_size=8``)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. rollout.group_size=8")
        key, value = item.split("=", 1)
        set_value(config, key.strip(), value)
    return config


def apply_mapping(config: Any, data: dict[str, Any], prefix: str = "") -> None:
    """Apply a nested mapping (a parsed YAML/JSON config file) to ``config``."""
    if not isinstance(data, dict):
        raise ConfigError(f"config file content must be a mapping of sections, got {type(data).__name__}")
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        target = _get(config, dotted)
        if dataclasses.is_dataclass(target) and isinstance(value, dict):
            apply_mapping(config, value, dotted + ".")
        elif isinstance(target, AlgoConfig):
            raise ConfigError(f"{dotted} must be a mapping")
        else:
            set_value(config, dotted, value)


def _get(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        if isinstance(node, AlgoConfig) and part not in _ALGO_OWN:
            return None
        if not dataclasses.is_dataclass(node) or part not in [f.name for f in dataclasses.fields(node)]:
            return None
        node = getattr(node, part)
    return node


def load_config_file(config: TrainConfig, path: str | Path) -> TrainConfig:
    """Apply a YAML (.yaml/.yml) or JSON config file to ``config``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(
                f"{path}: reading YAML needs PyYAML (pip install pyyaml), or write the config as JSON"
            ) from None
        data = yaml.safe_load(text) or {}
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: invalid JSON ({exc})") from None
    # `algo` sections may list hyperparameters directly: {"algo": {"name": "grpo", "lr": 1e-4}}
    algo = data.get("algo") if isinstance(data, dict) else None
    if isinstance(algo, dict):
        if "name" in algo:
            config.algo.name = str(algo["name"])
        for k, v in algo.items():
            if k == "episode_mean":
                set_value(config, "algo.episode_mean", v)
            elif k == "params" and isinstance(v, dict):
                for pk, pv in v.items():
                    _set_algo_param(config.algo, pk, pv)
            elif k != "name":
                _set_algo_param(config.algo, k, v)
        data = {k: v for k, v in data.items() if k != "algo"}
    apply_mapping(config, data)
    return config


def to_dict(config: Any) -> dict[str, Any]:
    """The config as plain JSON-ready data."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))


def from_dict(data: dict[str, Any]) -> TrainConfig:
    """Rebuild a TrainConfig saved by :func:`to_dict` (e.g. from a checkpoint)."""
    config = TrainConfig()
    algo = data.get("algo", {})
    config.algo.name = algo.get("name", config.algo.name)
    config.algo.params = dict(algo.get("params", {}))
    config.algo.episode_mean = bool(algo.get("episode_mean", config.algo.episode_mean))
    apply_mapping(config, {k: v for k, v in data.items() if k != "algo"})
    return config


# --------------------------------------------------------------------------- validation
CHOICES = {
    "model.tiny": ("maze-vlm", "text", "vlm"),
    "model.dtype": ("float32", "bfloat16", "float16"),
    "sft.enabled": ("auto", "always", "never"),
    "sft.mode": ("full", "lora"),
    "loop.backend": ("hf", "vllm"),
    "runner.kind": ("local", "ray"),
}


def validate(config: TrainConfig, need_model: bool = True) -> None:
    """Cross-field checks; raises :class:`ConfigError` naming the key and the fix."""
    import algos

    from mazegym.evalsets import EVAL_SETS

    for key, allowed in CHOICES.items():
        value = _get(config, key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not allowed; choose one of {', '.join(allowed)}")
    if config.algo.name not in algos.available():
        raise ConfigError(
            f"algo.name={config.algo.name!r} is not a registered algorithm; choose one of "
            f"{', '.join(algos.available())}"
        )
    if config.rollout.branching and algos.get(config.algo.name).needs_value_head:
        also = " algo.skip_zero_advantage=false" if config.algo.params.get("skip_zero_advantage") else ""
        raise ConfigError(
            f"rollout.branching=true scores each branch by its own outcome; algo.name={config.algo.name} "
            f"trains a critic over whole plays: set rollout.branching=false{also} for it, or use a "
            "group-relative algorithm (grpo, dr_grpo, rloo, dapo)"
        )
    try:
        algos.get(config.algo.name).check_config(algos.make_config(config.algo.name, **config.algo.params))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algo ({config.algo.name}): {exc}") from None
    for name in [config.maze.eval_set, *config.maze.heldout_sets]:
        if name not in EVAL_SETS:
            raise ConfigError(f"maze eval set {name!r} does not exist; choose one of {', '.join(sorted(EVAL_SETS))}")
    if EVAL_SETS[config.maze.eval_set].size != config.maze.size:
        raise ConfigError(
            f"maze.eval_set={config.maze.eval_set!r} has "
            f"{EVAL_SETS[config.maze.eval_set].size}x{EVAL_SETS[config.maze.eval_set].size} mazes "
            f"but maze.size={config.maze.size}; pick the set of your size"
        )
    if config.maze.size < 5 or config.maze.size % 2 == 0:
        raise ConfigError(f"maze.size must be odd and >= 5, got {config.maze.size}")
    positive = {
        "loop.mazes_per_step": config.loop.mazes_per_step,
        "sft.batch_size": config.sft.batch_size,
        "rollout.group_size": config.rollout.group_size,
        "rollout.max_moves": config.rollout.max_moves,
        "lora.rank": config.lora.rank,
        "checkpoint.keep": config.checkpoint.keep,
    }
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    for key in ("loop.steps", "sft.steps", "eval.every", "checkpoint.every"):
        if _get(config, key) < 0:
            raise ConfigError(f"{key} must be >= 0, got {_get(config, key)}")
    if config.model.tiny_hidden % 64:
        raise ConfigError(f"model.tiny_hidden must be a multiple of 64 (head_dim 64), got {config.model.tiny_hidden}")
    try:  # RolloutConfig validates its own fields
        RolloutConfig(**dataclasses.asdict(config.rollout))
    except ValueError as exc:
        raise ConfigError(f"rollout: {exc}") from None
    if config.rollout.branching:
        algo_config = algos.make_config(config.algo.name, **config.algo.params)
        if algo_config.old_logprobs != "recompute":
            raise ConfigError(
                "rollout.branching=true: branch turns were scored, not sampled, so they carry no sampling "
                "log-probs; set algo.old_logprobs=recompute"
            )
    from mazegym.envs.vismaze import VisMazeEnv

    try:  # the env checks its own arguments: a wrong env_kwargs key or value fails now, not minutes into a run
        VisMazeEnv(
            size=config.maze.size,
            max_moves=config.rollout.max_moves,
            obs_mode=config.rollout.obs_mode,
            require_stop=config.rollout.require_stop,
            **config.rollout.env_kwargs,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"rollout.env_kwargs={config.rollout.env_kwargs!r} (or the maze/rollout settings the env "
            f"is built with): {exc}"
        ) from None
    if config.rollout.obs_mode in ("image", "both") and not config.model.path and config.model.tiny == "text":
        raise ConfigError(
            "rollout.obs_mode uses images but the tiny text model cannot see them; set model.tiny=maze-vlm or "
            "rollout.obs_mode=text"
        )
    if not config.model.path and config.model.tiny == "maze-vlm" and config.rollout.obs_mode != "image":
        raise ConfigError("model.tiny=maze-vlm reads the maze image only; set rollout.obs_mode=image")
    if (
        config.lora.modules_to_save
        and config.loop.backend == "vllm"
        and not (config.lora.modules_to_save == ["vision_tower"] and _served_through_prompt_embeds(config))
    ):
        raise ConfigError(
            "lora.modules_to_save trains whole modules, which vLLM's LoRA cannot load (MazeVLM's "
            "vision_tower excepted: its encoder runs beside the engine); use loop.backend=hf or leave it empty"
        )
    if not 0.0 <= config.sft.random_starts <= 1.0:
        raise ConfigError(f"sft.random_starts must be in [0, 1], got {config.sft.random_starts}")
    for key in ("model.vision_width", "model.vision_iterations", "model.vision_patch_px"):
        if _get(config, key) < 1:
            raise ConfigError(f"{key} must be >= 1, got {_get(config, key)}")
    if config.model.path and need_model:
        path = Path(config.model.path).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"model.path={config.model.path!r} is not a local model directory (no config.json there); "
                "download the checkpoint to a local directory and pass it as model.path=/path/to/model, "
                "or leave model.path empty to build the tiny CPU model"
            )
    resume = config.checkpoint.resume
    if resume not in ("auto", "latest", "none") and not Path(resume).exists():
        raise ConfigError(
            f"checkpoint.resume={resume!r}: no such checkpoint; use auto, latest, none or an existing checkpoint path"
        )

"""Cross-field checks of a whole :class:`~runners.config.schema.TrainConfig` (:func:`validate`)."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

from mazegym.evalsets import MazeStream
from runners import models
from runners.config.overrides import _get, set_value
from runners.config.schema import ConfigError, TrainConfig
from runners.config.schemes import SCHEME_NAMES, flat_settings, scheme_of
from runners.rollout import collectors
from runners.rollout.collect import RolloutConfig


CHOICES = {
    "model.dtype": ("float32", "bfloat16", "float16"),
    "model.vision_tokens": ("cells", "agent"),
    "model.vision_state": ("residual", "gated"),
    "model.vision_locator": ("learned", "colour"),
    "sft.enabled": ("auto", "always", "never"),
    "sft.mode": ("full", "lora"),
    "loop.engine": ("hf", "vllm"),
    "runner.kind": ("local", "ray"),
    "runner.ray.placement_strategy": ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
    "runner.ray.dist_backend": ("auto", "gloo", "nccl"),
}


BOUNDS: dict[str, tuple[float | None, float | None, bool]] = {
    "sft.lr": (0.0, None, True),
    "sft.vision_lr": (0.0, None, True),
    "sft.random_starts": (0.0, 1.0, False),
    "rollout.temperature": (0.0, None, False),
    "rollout.top_p": (0.0, 1.0, True),
    "rollout.max_new_tokens": (1, 1_000_000, False),
    "eval.temperature": (0.0, None, False),
    "model.tiny_hidden": (64, 8192, False),
    "model.tiny_layers": (1, 64, False),
    "model.vision_width": (1, 4096, False),
    "model.vision_iterations": (1, 10_000, False),
    "model.vision_grad_iterations": (0, 10_000, False),
    "eval.vision_iterations": (0, 10_000, False),
    "lora.alpha": (0.0, None, True),
    "lora.dropout": (0.0, 0.999, False),
    "loop.mazes_per_step": (1, 100_000, False),
    "loop.steps": (0, 10_000_000, False),
    "loop.num_threads": (0, 1024, False),
    "loop.update_threads": (1, 64, False),
    "loop.rollout_threads": (1, 64, False),
    "sft.steps": (0, 10_000_000, False),
    "sft.batch_size": (1, 1_000_000, False),
    "runner.vllm_gpu_memory_utilization": (0.0, 1.0, True),
    "model.image_cell_px": (1, 1024, False),
    "rollout.branch_samples": (1, 100_000, False),
    "rollout.max_moves": (1, 1_000_000, False),
    "rollout.history_k": (0, 100_000, False),
    "maze.stream_seed": (0, 2**31 - 1, False),
    "loop.seed": (0, 2**31 - 1, False),
    "sft.seed": (0, 2**31 - 1, False),
    "sft.detours": (0, 10_000, False),
    "sft.vision_steps": (0, 10_000_000, False),
    "sft.vision_batch_size": (0, 10_000_000, False),
    "sft.localization_weight": (0.0, None, False),
    "sft.vision_path_weight": (0.0, None, False),
    "loop.parity_every": (0, 10_000_000, False),
    "runner.num_gpus": (0, 100_000, False),
    "runner.num_workers": (1, 100_000, False),
    "runner.ray.cpus_per_worker": (0.0, None, True),
    "runner.ray.max_restarts": (0, 10_000, False),
    "runner.ray.collective_timeout_s": (0.0, None, True),
    "runner.ray.worker_threads": (1, 1024, False),
    # Their lower bound (>= 1) is checked in validate() with its own message.
    "model.vision_patch_px": (None, 4096, False),
    "lora.rank": (None, 4096, False),
    "rollout.group_size": (None, 100_000, False),
    "checkpoint.keep": (None, 1_000_000, False),
}
"""Ranges of numeric settings: ``key -> (low, high, low excluded)``; None = unbounded on that side. Every float of
the config (``algo.params`` included) must also be finite; the algorithm checks its own fields' ranges."""

DEVICES = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
"""What ``model.device`` may name."""


def _finite_numbers(value: object, key: str) -> None:
    """Raise ConfigError naming the first NaN or infinite float inside ``value`` (dataclasses, dicts, lists)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={value} is not a finite number")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _finite_numbers(getattr(value, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(value, dict):
        for k, v in value.items():  # algo.params holds the algorithm's own fields, written algo.<field>
            _finite_numbers(v, f"{key.removesuffix('.params')}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _finite_numbers(v, f"{key}[{i}]")


def check_ranges(config: TrainConfig) -> None:
    """Every float finite, every setting of :data:`BOUNDS` in its range, ``run_dir``, ``model.device`` and
    ``maze.generator`` well-formed; raises ConfigError naming the key."""
    from mazegym.maze import GENERATORS

    _finite_numbers(config, "")
    for key, (low, high, low_open) in BOUNDS.items():
        value = _get(config, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}={value!r} must be a number")
        too_low = low is not None and (value <= low if low_open else value < low)
        if too_low or (high is not None and value > high):
            lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
            hi = "" if high is None else f"<= {high:g}" if isinstance(high, float) else f"<= {high:_}"
            raise ConfigError(f"{key}={value!r} is out of range: it must be {' and '.join(p for p in (lo, hi) if p)}")
    if not str(config.run_dir).strip():
        raise ConfigError("run_dir is empty: name the directory the run writes to")
    if not DEVICES.match(str(config.model.device)):
        raise ConfigError(f"model.device={config.model.device!r} is not a device; choose cpu, cuda, cuda:N or mps")
    if config.maze.generator not in GENERATORS:
        raise ConfigError(
            f"maze.generator={config.maze.generator!r} is not a generator; choose one of {', '.join(GENERATORS)}"
        )


def validate(config: TrainConfig, need_model: bool = True) -> None:
    """Cross-field checks; raises :class:`ConfigError` naming the key and the fix."""
    import algos

    from mazegym.evalsets import EVAL_SETS

    check_ranges(config)

    for key, allowed in CHOICES.items():
        value = _get(config, key)
        if value not in allowed:
            raise ConfigError(f"{key}={value!r} is not allowed; choose one of {', '.join(allowed)}")
    if config.model.tiny not in models.available():  # looked up now: a plugin may have registered one
        raise ConfigError(
            f"model.tiny={config.model.tiny!r} is not allowed; choose one of {', '.join(models.available())} "
            "(one of your own: load the file that registers it with --plugin FILE.py)"
        )
    if config.algo.name not in algos.available():
        raise ConfigError(
            f"algo.name={config.algo.name!r} is not a registered algorithm; choose one of "
            f"{', '.join(algos.available())}"
        )
    try:
        collectors.of(config.rollout)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    schemes = algos.rollout_schemes(config.algo.name)
    if scheme_of(config) not in schemes:
        others = [name for name in algos.available() if scheme_of(config) in algos.rollout_schemes(name)]
        raise ConfigError(
            f"{_scheme_choice(config)}: algo.name={config.algo.name} trains on "
            f"{' or '.join(SCHEME_NAMES[s] for s in schemes)} only; set rollout.branching="
            f"{str(schemes[0] == 'branching').lower()} (or leave rollout.branching to the preset: mazegym then "
            f"moves the run to the algorithm's scheme), or use {', '.join(others)}"
        )
    _check_scheme_settings(config)
    try:
        algos.get(config.algo.name).check_config(algos.make_config(config.algo.name, **config.algo.params))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algo ({config.algo.name}): {exc}") from None
    for name in [config.maze.eval_set, *config.maze.heldout_sets]:
        if name not in EVAL_SETS:
            raise ConfigError(f"maze eval set {name!r} does not exist; choose one of {', '.join(sorted(EVAL_SETS))}")
    for name, count in config.eval.set_mazes.items():
        if name not in EVAL_SETS:
            raise ConfigError(
                f"eval.set_mazes names {name!r}, which is not an eval set; choose from {', '.join(sorted(EVAL_SETS))}"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"eval.set_mazes[{name!r}]={count!r} must be a whole number of mazes >= 1")
    if config.maze.size < 5 or config.maze.size % 2 == 0:  # before the checks that compare sizes
        raise ConfigError(f"maze.size must be odd and >= 5 (a grid of cells and walls), got {config.maze.size}")
    if EVAL_SETS[config.maze.eval_set].size != config.maze.size:
        raise ConfigError(
            f"maze.eval_set={config.maze.eval_set!r} has "
            f"{EVAL_SETS[config.maze.eval_set].size}x{EVAL_SETS[config.maze.eval_set].size} mazes "
            f"but maze.size={config.maze.size}; pick the set of your size"
        )
    depths = config.sft.vision_iterations
    if depths and (
        len(depths) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) for d in depths)
        or not 1 <= depths[0] <= depths[1] <= 10_000
    ):
        raise ConfigError(
            f"sft.vision_iterations={depths!r} must be [] or [low, high] with 1 <= low <= high <= 10000 "
            "(integers: the range of encoder iterations a vision pretraining batch runs)"
        )
    try:
        MazeStream(config.maze.size, generator=config.maze.generator, shapes=config.maze.rl_shapes, exclude_eval=False)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"maze.rl_shapes={config.maze.rl_shapes!r}: {exc}") from None
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
    try:  # RolloutConfig validates its own fields, the collector its settings
        rollout = RolloutConfig(**dataclasses.asdict(config.rollout))
        collector = collectors.check(rollout)
    except ValueError as exc:
        raise ConfigError(f"rollout: {exc}") from None
    if not collector.sampled:
        algo_config = algos.make_config(config.algo.name, **config.algo.params)
        if algo_config.old_logprobs != "recompute":
            raise ConfigError(
                f"rollout.collector={collector.name}: its turns were scored, not sampled, so they carry no sampling "
                "log-probs; set algo.old_logprobs=recompute"
            )
    if config.loop.overlap_generation and not collector.draws_no_torch_randomness(rollout):
        raise ConfigError(
            "loop.overlap_generation=true needs rollout.branching=true (without sampled greedy-continuation worlds): "
            "branch scoring draws no random numbers, while sampled plays seed torch's global generator, which the "
            "update running beside them shares"
        )
    if config.loop.update_threads < 1:
        raise ConfigError(f"loop.update_threads must be >= 1, got {config.loop.update_threads}")
    if config.loop.update_threads > 1 and config.runner.kind == "ray":
        raise ConfigError(
            f"loop.update_threads={config.loop.update_threads} is the local runner's data parallelism; the Ray runner "
            "parallelises over runner.num_workers: set loop.update_threads=1"
        )
    if not config.logging.calibration_seconds >= 0 or config.logging.calibration_seconds > 60:
        raise ConfigError(
            f"logging.calibration_seconds must be between 0 (skip) and 60, got {config.logging.calibration_seconds}"
        )
    if config.loop.max_env_turns < 0:
        raise ConfigError(f"loop.max_env_turns must be >= 0 (0 = no budget), got {config.loop.max_env_turns}")
    if config.loop.max_minutes < 0:
        raise ConfigError(f"loop.max_minutes must be >= 0 (0 = no time cap), got {config.loop.max_minutes}")
    from runners.rollout.env import make_env

    try:  # the env checks its own arguments: a wrong env_kwargs key or value fails now, not minutes into a run
        make_env(
            config.maze.size,
            config.rollout.max_moves,
            config.rollout.obs_mode,
            config.rollout.require_stop,
            config.rollout.env_kwargs,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"rollout.env_kwargs={config.rollout.env_kwargs!r} (or the maze/rollout settings the env "
            f"is built with): {exc}"
        ) from None
    tiny = None if config.model.path else models.get(config.model.tiny)
    problems = tiny.validate(config) if tiny else []
    if problems:
        raise ConfigError("; ".join(problems))
    if (
        config.lora.modules_to_save
        and config.loop.engine == "vllm"
        and not set(config.lora.modules_to_save) <= set(_served_beside_engine(config))
    ):
        raise ConfigError(
            "lora.modules_to_save trains whole modules, which vLLM's LoRA cannot load (MazeVLM's "
            "vision_tower and multi_modal_projector excepted: they run beside the engine); use loop.engine=hf or "
            "leave it empty"
        )
    if not 0.0 <= config.sft.random_starts <= 1.0:
        raise ConfigError(f"sft.random_starts must be in [0, 1], got {config.sft.random_starts}")
    if config.model.vision_grad_iterations and tiny and tiny.truncate_vision_backward is None:
        recurrent = " or ".join(models.having("truncate_vision_backward"))
        raise ConfigError(
            "model.vision_grad_iterations truncates the backward pass of a recurrent vision encoder; "
            f"model.tiny={config.model.tiny!r} has none (use model.tiny={recurrent} or leave it 0)"
        )
    depths = config.model.vision_update_iterations
    if depths and not (len(depths) == 2 and 1 <= depths[0] <= depths[1]):
        raise ConfigError(
            f"model.vision_update_iterations must be [] or [low, high] with 1 <= low <= high, got {depths}"
        )
    if depths and tiny and tiny.vary_vision_iterations is None:
        recurrent = " or ".join(models.having("vary_vision_iterations"))
        raise ConfigError(
            "model.vision_update_iterations varies the depth of a recurrent vision encoder; "
            f"model.tiny={config.model.tiny!r} has none (use model.tiny={recurrent} or leave it [])"
        )
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


def _check_scheme_settings(config: TrainConfig) -> None:
    """Every ``scheme_settings`` entry names a rollout scheme, and each of its settings is a config key it may set
    to that value (checked on a copy of ``config``)."""
    import copy

    import algos

    for scheme, nested in config.scheme_settings.items():
        if scheme not in algos.ROLLOUT_SCHEMES:
            raise ConfigError(
                f"scheme_settings.{scheme}: not a rollout scheme; choose one of {', '.join(algos.ROLLOUT_SCHEMES)}"
            )
        if not isinstance(nested, dict):
            raise ConfigError(f"scheme_settings.{scheme} must be a mapping of settings, got {nested!r}")
        trial = copy.deepcopy(config)
        for key, value in flat_settings(nested).items():
            if key.split(".")[0] == "scheme_settings" or key in ("rollout.branching", "rollout.collector"):
                raise ConfigError(f"scheme_settings.{scheme}.{key}: the scheme itself cannot be one of its settings")
            try:
                set_value(trial, key, value)
            except ConfigError as exc:
                raise ConfigError(f"scheme_settings.{scheme}: {exc}") from None


def _scheme_choice(config: TrainConfig) -> str:
    """The setting that chose the run's collector, as written on the command line."""
    if config.rollout.collector:
        return f"rollout.collector={config.rollout.collector}"
    return f"rollout.branching={str(config.rollout.branching).lower()}"


def _served_beside_engine(config: TrainConfig) -> tuple[str, ...]:
    """The modules the vLLM generator would run beside the engine for the configured model (its spec's
    ``beside_engine``; none for a model directory that cannot be read)."""
    try:
        return models.spec_for(config).beside_engine
    except (OSError, ValueError, RecursionError):
        return ()

"""Validation of a whole :class:`~runners.config.schema.TrainConfig` (:func:`validate`).

Each key is checked once, by its field's metadata (:mod:`runners.config.fields`); the algorithm's settings by the
algorithm's config class. Then the rules across keys, each where the part that owns it lives: the model kind's
(:attr:`runners.models.ModelSpec.validate`), the collector's (:attr:`runners.rollout.collectors.Collector.check`),
the runner's (:data:`runners.config.runner.RUNNER_RULES`); the rules that join parts are :data:`RULES` here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from runners import models
from runners.config.fields import check_fields
from runners.config.parts import SLOTS, section
from runners.config.runner import RUNNER_RULES
from runners.config.schema import ConfigError, TrainConfig
from runners.rollout import collectors
from runners.rollout.generation.engines import VLLM

SCHEME_NAMES = {"episodes": "episode plays", "branching": "branching rollouts"}
"""Each rollout scheme in words."""


def _parts_are_typed(config: TrainConfig) -> list[str]:
    """Each part's section is an instance of the chosen part's settings class (a part changed by assigning its name
    alone would run with another part's settings)."""
    for slot in SLOTS:
        settings = section(config, slot.section)
        name = getattr(settings, slot.selector)
        if name in slot.names() and type(settings) is not slot.settings_class(name):
            return [
                f"{slot.key}={name} but the {slot.section} section holds {type(settings).__name__}: choose a part "
                "with an override or a config file (runners.config.apply_overrides), which gives it its settings"
            ]
    return []


def _algorithm(config: TrainConfig) -> list[str]:
    """The algorithm checks its own settings (``algo.<field>``)."""
    import algos

    try:
        algos.get(config.algo.name).check_config(algos.make_config(config.algo.name, **config.algo.params))
    except (TypeError, ValueError) as exc:
        message = str(exc)
        names = {f.name for f in dataclasses.fields(algos.config_class(config.algo.name))}
        if message.split(" ", 1)[0] in names:  # the algorithm names its own field: write it as the key it is
            message = f"algo.{message}"
        return [f"algo ({config.algo.name}): {message}"]
    return []


def _scheme(config: TrainConfig) -> list[str]:
    """The algorithm trains on the collector's rollout scheme; else the presets (or the collector) that fit."""
    import algos

    collector = collectors.of(config.rollout)
    supported = algos.rollout_schemes(config.algo.name)
    if collector.scheme in supported:
        return []
    fitting = [name for name in collectors.available() if collectors.get(name).scheme in supported]
    presets = _presets_on(supported, config.preset)
    use = f"use --preset {' or --preset '.join(presets)}, or " if presets else ""
    return [
        f"algo.name={config.algo.name} trains on {' or '.join(SCHEME_NAMES.get(s, s) for s in supported)} only, but "
        f"rollout.collector.name={collector.name} collects {SCHEME_NAMES.get(collector.scheme, collector.scheme)}: "
        f"{use}set rollout.collector.name={fitting[0] if fitting else '...'} (with the settings that go with it)"
    ]


def _presets_on(schemes: tuple[str, ...], preset: str) -> list[str]:
    """The presets that extend ``preset`` and collect on one of ``schemes``."""
    from runners.config.presets import TRAINING_PRESETS, preset_data

    found = []
    for name in TRAINING_PRESETS:
        if preset and preset_data(name).get("extends") == preset:
            if collectors.of(TRAINING_PRESETS[name]().rollout).scheme in schemes:
                found.append(name)
    return found


def _collector(config: TrainConfig) -> list[str]:
    """The collector's own rules, and the old log-probs a collector that does not sample needs."""
    collector = collectors.of(config.rollout)
    problems = list(collector.check(config.rollout))
    if not collector.sampled:
        import algos

        if algos.make_config(config.algo.name, **config.algo.params).old_logprobs != "recompute":
            problems.append(
                f"rollout.collector.name={collector.name}: its turns were scored, not sampled, so they carry no "
                "sampling log-probs; set algo.old_logprobs=recompute"
            )
    return problems


def _overlap(config: TrainConfig) -> list[str]:
    """Overlapped collection needs a collector that leaves torch's random generator alone."""
    if config.loop.overlap_generation and not collectors.draws_no_torch_randomness(config.rollout):
        return [
            f"loop.overlap_generation=true needs a collector that draws no random numbers from torch "
            f"(rollout.collector.name={config.rollout.collector.name} does): the update running beside it shares "
            "torch's global generator; set loop.overlap_generation=false"
        ]
    return []


def _model(config: TrainConfig, need_model: bool) -> list[str]:
    """The model kind's own rules, and a ``model.path`` that holds a model of that kind."""
    problems = list(models.get(config.model.kind).validate(config.model, config.rollout))
    if not config.model.path:
        return problems
    path = Path(config.model.path).expanduser()
    if (path / "config.json").is_file():
        try:
            found = models.spec_for_dir(path).name
        except (OSError, ValueError, RecursionError):
            found = config.model.kind
        if found != config.model.kind:
            problems.append(f"model.path={config.model.path} holds a {found} model; set model.kind={found}")
    elif need_model:
        problems.append(
            f"model.path={config.model.path!r} is not a local model directory (no config.json there); download the "
            "checkpoint to a local directory and pass it as model.path=/path/to/model, or leave model.path empty to "
            "build the tiny CPU model"
        )
    return problems


def _mazes(config: TrainConfig) -> list[str]:
    """The eval set's mazes have the training size; the RL stream's shapes and the env's settings are valid."""
    from mazegym.evalsets import EVAL_SETS, MazeStream
    from runners.config.derived import rl_stream_args
    from runners.rollout.env import make_env

    size = EVAL_SETS[config.maze.eval_set].size
    if size != config.maze.size:
        return [
            f"maze.eval_set={config.maze.eval_set!r} has {size}x{size} mazes but maze.size={config.maze.size}; pick "
            "the set of your size"
        ]
    try:  # the stream the run will draw from, built as the run builds it
        MazeStream(**rl_stream_args(config))
    except (TypeError, ValueError, AttributeError) as exc:
        return [f"maze.rl_shapes={config.maze.rl_shapes!r}: {exc}"]
    r = config.rollout
    try:  # the env checks its own arguments: a wrong env_kwargs key or value fails now, not minutes into a run
        make_env(config.maze.size, r.max_moves, r.obs_mode, r.require_stop, r.env_kwargs)
    except (TypeError, ValueError) as exc:
        return [f"rollout.env_kwargs={r.env_kwargs!r} (or the maze/rollout settings the env is built with): {exc}"]
    return []


def _engine(config: TrainConfig) -> list[str]:
    """vLLM's LoRA cannot load modules an adapter trains in full, except those its generator runs beside it, nor
    LoRA on the vision side."""
    if config.engine.name != VLLM:
        return []
    errors = []
    if not config.lora.exclude_vision:
        errors.append(
            "lora.exclude_vision=false puts LoRA on the vision side, which vLLM does not serve; use engine.name=hf, "
            "or train the encoder in full (lora.modules_to_save=[vision_tower])"
        )
    beside = models.get(config.model.kind).beside_engine
    if not set(config.lora.modules_to_save) <= set(beside):
        errors.append(
            "lora.modules_to_save trains whole modules, which vLLM's LoRA cannot load (MazeVLM's vision_tower and "
            "multi_modal_projector excepted: they run beside the engine); use engine.name=hf or leave it empty"
        )
    return errors


def _runner(config: TrainConfig) -> list[str]:
    """The runner's own rules."""
    rule = RUNNER_RULES.get(config.runner.kind)
    return rule(config) if rule else []


RULES: tuple[Callable[[TrainConfig], list[str]], ...] = (
    _parts_are_typed,
    _scheme,
    _algorithm,
    _collector,
    _overlap,
    _mazes,
    _engine,
    _runner,
)
"""The rules across keys, in the order they are checked (the model's, which may read the disk, comes after)."""


def validate(config: TrainConfig, need_model: bool = True) -> None:
    """Check every key by its one check, then every rule across keys; raises :class:`ConfigError` naming the key
    and the fix. ``need_model=False`` (a dry run) does not ask for ``model.path`` to exist here."""
    check_fields(config)
    for rule in RULES:
        problems = rule(config)
        if problems:
            raise ConfigError("; ".join(problems))
    problems = _model(config, need_model)
    if problems:
        raise ConfigError("; ".join(problems))

"""Configs saved before each part owned its section (version 1: flat keys), read as today's (version 2).

A run's ``config.json``, a checkpoint's ``state.json`` and a built base model's recipe record the config they were
made with. :func:`migrate` turns a version-1 mapping into version 2, key by key (:data:`MOVED`), keeping only the
settings of the parts it chose (the others had no effect), so a run saved before the change resumes after it. A
mapping from a newer mazegym is refused naming its version. A user typing an old key gets the new one instead
(:func:`did_you_mean`): old spellings are not aliases.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from runners import models
from runners.config.runner import RAY, RUNNERS
from runners.config.schema import CONFIG_VERSION, ConfigError
from runners.rollout import collectors
from runners.rollout.generation.engines import ENGINES, HF

MOVED = {
    "model.tiny": "model.kind",
    "sft.vision_steps": "model.vision_pretraining.steps",
    "sft.vision_batch_size": "model.vision_pretraining.batch_size",
    "sft.vision_lr": "model.vision_pretraining.lr",
    "sft.vision_iterations": "model.vision_pretraining.iterations",
    "sft.vision_path_weight": "model.vision_pretraining.path_weight",
    "sft.localization_weight": "model.localization_weight",
    "sft.freeze_vision": "model.freeze_vision",
    "eval.vision_iterations": "model.eval_vision_iterations",
    "eval.scale_vision_iterations": "model.scale_eval_vision_iterations",
    "rollout.branch_gamma": "rollout.collector.gamma",
    "rollout.branch_worlds": "rollout.collector.worlds",
    "rollout.branch_continuation": "rollout.collector.continuation",
    "rollout.branch_samples": "rollout.collector.samples",
    "rollout.branch_settled": "rollout.collector.settled",
    "rollout.branch_prompts": "rollout.collector.prompts",
    "rollout.branch_reward": "rollout.collector.reward",
    "rollout.branch_moves_only": "rollout.collector.moves_only",
    "loop.engine": "engine.name",
    "loop.rollout_threads": "engine.rollout_threads",
    "runner.vllm_gpu_memory_utilization": "engine.gpu_memory_utilization",
    "loop.num_threads": "runner.num_threads",
    "loop.update_threads": "runner.update_threads",
}
"""Version-1 keys that version 2 spells otherwise, old -> new (``runner.ray.<key>`` became ``runner.<key>``, and
``rollout.branch_<key>`` ``rollout.collector.<key>``)."""

REPLACED = {
    "rollout.branching": "rollout.collector.name=branches (or plays)",
    "logging.wandb": "logging.sinks={wandb: mazegym} (the sink and its project)",
    "logging.mlflow": "logging.sinks={mlflow: mazegym} (the sink and its experiment)",
    "logging.project": "logging.sinks={wandb: NAME} (each sink names its own project)",
    "scheme_settings": "a preset for each rollout scheme, e.g. --preset cpu-maze-vlm-plays",
}
"""Version-1 keys whose meaning version 2 writes with another key and value."""


def did_you_mean(dotted: str, value: Any = None) -> str | None:
    """The one-line hint for a key spelt as in version 1 (``None`` for any other key)."""
    if dotted == "rollout.branching" and isinstance(value, (bool, str)):
        on = value if isinstance(value, bool) else value.strip().lower() in ("true", "1", "yes")
        return f"did you mean rollout.collector.name={'branches' if on else 'plays'}?"
    if dotted == "rollout.collector" and isinstance(value, str):
        return f"did you mean rollout.collector.name={value}?"
    if dotted in REPLACED:
        return f"did you mean {REPLACED[dotted]}?"
    if dotted in MOVED:
        return f"did you mean {MOVED[dotted]}?"
    if dotted.startswith("runner.ray."):
        return f"did you mean runner.{dotted.removeprefix('runner.ray.')}?"
    if dotted.startswith("rollout.branch_"):
        return f"did you mean rollout.collector.{dotted.removeprefix('rollout.branch_')}?"
    return None


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a saved config) in today's layout: as it is when it is version 2, converted from version 1 (no
    ``config_version``); ``ConfigError`` naming the version when a newer mazegym saved it."""
    version = data.get("config_version", 1)
    if version == CONFIG_VERSION:
        return data
    if not isinstance(version, int) or not 1 <= version < CONFIG_VERSION:
        raise ConfigError(
            f"this config was saved by another mazegym (config version {version!r}; this one reads versions 1 to "
            f"{CONFIG_VERSION}): use the mazegym that wrote it, or start a new run"
        )
    return _from_version_1(copy.deepcopy(data))


_MISSING = object()


def _take(data: dict[str, Any], dotted: str) -> Any:
    """Remove and return ``data[a][b]`` for ``dotted`` ``a.b`` (``_MISSING`` when absent)."""
    section, _, key = dotted.partition(".")
    holder = data.get(section)
    return holder.pop(key, _MISSING) if isinstance(holder, dict) else _MISSING


def _put(data: dict[str, Any], dotted: str, value: Any, allowed: set[str]) -> None:
    """Set ``dotted`` in ``data`` (sections made as needed) when ``value`` is present and the key is one the chosen
    part has (``allowed``: the dotted keys of its settings)."""
    if value is _MISSING or dotted not in allowed:
        return
    *path, leaf = dotted.split(".")
    for part in path:
        data = data.setdefault(part, {})
    data[leaf] = value


def _keys(cls: type, prefix: str) -> set[str]:
    """The dotted keys of a settings dataclass (nested sections included)."""
    import dataclasses

    keys = set()
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        keys.add(prefix + f.name)
        if dataclasses.is_dataclass(default):
            keys |= _keys(type(default), f"{prefix}{f.name}.")
    return keys


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    """A version-1 config in version 2: each part's settings moved into its section, the other parts' dropped."""
    for section in ("model", "rollout", "loop", "runner", "logging", "sft", "eval", "algo"):
        data.setdefault(section, {})
    moved = {old: _take(data, old) for old in MOVED}
    kind = _model_kind(data["model"], moved.pop("model.tiny"))
    collector = _collector_name(data["rollout"])
    engine = moved["loop.engine"] if moved["loop.engine"] is not _MISSING else HF
    runner = data["runner"].get("kind", "local")
    ray = data["runner"].pop("ray", {})
    allowed = (
        _keys(models.get(kind).settings, "model.")
        | _keys(collectors.get(collector).settings, "rollout.collector.")
        | _keys(ENGINES.get(engine, ENGINES[HF]), "engine.")
        | _keys(RUNNERS.get(runner, RUNNERS["local"]), "runner.")
    )
    data["model"] = {k: v for k, v in data["model"].items() if f"model.{k}" in allowed}
    data["model"]["kind"] = kind
    data["rollout"]["collector"] = {"name": collector}
    data["engine"] = {"name": engine}
    for old, new in MOVED.items():
        _put(data, new, moved.get(old, _MISSING), allowed)
    for key in [k for k in data["rollout"] if k.startswith("branch_")]:  # the branches collector's, by their prefix
        _put(data, f"rollout.collector.{key.removeprefix('branch_')}", data["rollout"].pop(key), allowed)
    if runner == RAY:
        for key, value in ray.items() if isinstance(ray, dict) else ():
            _put(data, f"runner.{key}", value, allowed)
    data["runner"] = {k: v for k, v in data["runner"].items() if f"runner.{k}" in allowed}
    project = data["logging"].pop("project", "mazegym")
    data["logging"]["sinks"] = {s: project for s in ("wandb", "mlflow") if data["logging"].pop(s, False)}
    data.pop("scheme_settings", None)
    algo = data["algo"]
    if "episode_mean" in algo:  # saved when it was a field of the section itself
        algo.setdefault("params", {}).setdefault("episode_mean", bool(algo.pop("episode_mean")))
    data["config_version"] = CONFIG_VERSION
    return data


def _model_kind(model: dict[str, Any], tiny: Any) -> str:
    """The kind a version-1 model section trains: its model directory's when ``path`` names a readable one, else the
    tiny kind it named."""
    path = model.get("path")
    if path and (Path(path).expanduser() / "config.json").is_file():
        return models.spec_for_dir(Path(path).expanduser()).name
    return tiny if isinstance(tiny, str) and tiny else "text"


def _collector_name(rollout: dict[str, Any]) -> str:
    """The collector a version-1 rollout section chose: ``collector`` when set, else ``branching``'s built-in."""
    named, branching = rollout.pop("collector", "") or "", rollout.pop("branching", False)
    return named or ("branches" if branching else collectors.PLAYS)

"""How a command assembles its config: preset, config files, ``--run-dir`` / ``--resume``, ``KEY=VALUE`` overrides;
for the commands that read a finished run (eval, serve), the run's own saved ``config.json`` first."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def build_config(args: argparse.Namespace):
    """Preset -> config files -> --run-dir / --resume -> KEY=VALUE overrides, in one resolution
    (:func:`runners.config.build_config`); its notes are kept in ``args.config_notes``."""
    from runners.config import build_config as resolve_command_line
    from runners.config.presets import DEFAULT_PRESET

    load_plugins(args)
    config, args.config_notes = resolve_command_line(
        args.preset or DEFAULT_PRESET, args.config, args.run_dir, getattr(args, "resume", None), args.overrides
    )
    return config


def load_plugins(args: argparse.Namespace) -> None:
    """Import the ``--plugin`` files and modules, which register their parts (a name that is neither: ConfigError)."""
    from runners.config import ConfigError
    from runners.registry import load_plugin

    for plugin in getattr(args, "plugin", []):
        try:
            load_plugin(plugin)
        except ValueError as exc:
            raise ConfigError(f"--plugin: {exc}") from None


RUN_CONFIG_SECTIONS = ("model", "maze", "rollout", "algo", "loop", "sft")
"""Sections every run's ``config.json`` holds (it is the whole config, written by ``mazegym train``)."""


def read_run_config(path: Path) -> dict:
    """A run's saved ``config.json`` as a dict; ValueError naming the file when it is not one mazegym wrote (not
    JSON, not an object, sections missing): evaluating defaults instead would score a random model."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path} is unreadable ({type(exc).__name__}): not a mazegym run config") from None
    missing = [s for s in RUN_CONFIG_SECTIONS if not isinstance(data, dict) or not isinstance(data.get(s), dict)]
    if missing:
        raise ValueError(
            f"{path} is not a mazegym run config (no {', '.join(missing)} section"
            f"{'s' if len(missing) > 1 else ''}): the file is damaged or from elsewhere; rerun `mazegym train` there, "
            "or pass --model DIR to evaluate a model outside a run"
        )
    return data


def eval_config(args: argparse.Namespace):
    """The config of the run being evaluated: ``<run_dir>/config.json`` (then --config files and overrides).

    Without --model, the run dir must hold a run (its config.json); otherwise nothing would be
    evaluated but a freshly built random model. ``--preset`` replaces the run's config.
    """
    from runners.config import validate

    if args.preset is None:
        config = build_config(args)  # only for the default run dir
        run_dir = Path(args.run_dir or config.run_dir)
        saved = run_dir / "config.json"
        if saved.is_file():
            return _saved_run_config(args, saved, run_dir)
    else:
        config = build_config(args)
        if (Path(config.run_dir) / "config.json").is_file():  # a real run, evaluated under the named preset
            return config
    if not args.model:
        validate(config, need_model=False)  # a wrong key or value is the first thing to report
        raise ValueError(
            f"{config.run_dir} holds no mazegym run (no config.json); train there first, or pass "
            f"--model DIR (and --adapter DIR) to evaluate a model outside a run"
        )
    return config


def _saved_run_config(args: argparse.Namespace, saved: Path, run_dir: Path):
    """The run's saved config (read in today's layout), then the --config files and the overrides of ``args``, in one
    resolution (:func:`runners.config.run_config`); its notes are kept in ``args.config_notes``."""
    from runners.config import run_config

    config, args.config_notes = run_config(read_run_config(saved), args.config, str(run_dir), args.overrides)
    return config

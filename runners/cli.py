"""The ``mazegym`` command line: sft, train, eval, play, export.

Configuration is layered: a preset (``--preset``, default ``cpu-maze-vlm``), then config files
(``--config a.yaml --config b.json``), then ``key=value`` overrides (``rollout.group_size=8``).
Every key and value is checked before any work starts. ``mazegym train --help`` lists every
key with its current value and help text.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Callable

DESCRIPTION = """\
mazegym: train LLM / VLM agents to solve mazes with SFT then RL (GRPO by default).

The main job, on CPU with a tiny VLM built from code (no downloads, no GPU):

    mazegym train                      # SFT (if no SFT checkpoint yet) -> GRPO -> before/after table

Typical commands:

    mazegym train --preset cpu-tiny                           # the text row: tiny LM on ASCII mazes
    mazegym train loop.mazes_per_step=32 algo.lr=1e-4 loop.steps=100
    mazegym train --config my.yaml --resume none              # config file, fresh start
    mazegym train --preset qwen3-vl-8b-lora32 --dry-run       # validate the 6-GPU recipe, print the plan
    mazegym sft sft.steps=500                                 # only the supervised stage
    mazegym eval --run-dir runs/cpu-maze-vlm                  # evaluate the latest checkpoint
    mazegym play --size 9                                     # play a maze yourself in the terminal
    mazegym export --run-dir runs/cpu-maze-vlm --merged       # adapter (+ merged model) for vLLM / transformers
    mazegym serve runs/cpu-maze-vlm --port 8000               # the trained policy over HTTP (chat completions)
    mazegym play-remote http://127.0.0.1:8000                 # play the fixed mazes against that server
    mazegym report runs/cpu-maze-vlm                          # one HTML page: curves, solved mazes, replays
    mazegym presets                                           # list presets

Overrides are KEY=VALUE with dotted keys; `mazegym train --help` lists them all.
"""

COMMON_EPILOG = "Config keys (KEY=VALUE overrides; values shown for preset {preset}):\n"


# --------------------------------------------------------------------------- config assembly
def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset", default=None, help="named preset to start from (default: cpu-maze-vlm; see `mazegym presets`)"
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML or JSON config file, nested like the keys below (repeatable; applied in order)",
    )
    parser.add_argument("--run-dir", default=None, help="run directory (same as run_dir=...)")
    _add_plugin_arg(parser)
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides, e.g. rollout.group_size=8"
    )


def _add_plugin_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE.py|MODULE",
        help="import this first: your own file or module that registers an algorithm, a model kind or a rollout "
        "collector (repeatable; see docs/extending.md)",
    )


def build_config(args: argparse.Namespace):
    """Preset -> config files -> --run-dir / --resume -> KEY=VALUE overrides -> the rollout scheme the algorithm
    trains on (:func:`runners.config.resolve_scheme`); what that changed is kept in ``args.config_notes``."""
    from runners.config import (
        apply_config_file,
        apply_overrides,
        override_keys,
        read_config_file,
        resolve_scheme,
        scheme_of,
    )
    from runners.config.presets import DEFAULT_PRESET, get_preset

    _load_plugins(args)
    config = get_preset(args.preset or DEFAULT_PRESET)
    base = scheme_of(config)
    files = [read_config_file(path) for path in args.config]
    for data in files:
        apply_config_file(config, data)
    if args.run_dir:
        config.run_dir = args.run_dir
    if getattr(args, "resume", None):
        config.checkpoint.resume = args.resume
    apply_overrides(config, list(args.overrides))
    note = resolve_scheme(config, base, override_keys(list(args.overrides), files))
    args.config_notes = [note] if note else []
    return config


def _load_plugins(args: argparse.Namespace) -> None:
    """Import the ``--plugin`` files and modules, which register their parts (a name that is neither: ConfigError)."""
    from runners.config import ConfigError
    from runners.registry import load_plugin

    for plugin in getattr(args, "plugin", []):
        try:
            load_plugin(plugin)
        except ValueError as exc:
            raise ConfigError(f"--plugin: {exc}") from None


def _fields_help(preset: str) -> str:
    from runners.config import describe_fields
    from runners.config.presets import get_preset

    rows = describe_fields(get_preset(preset))
    out = [COMMON_EPILOG.format(preset=preset)]
    section = None
    for key, value, doc in rows:
        head = key.split(".")[0] if "." in key else ""
        if head != section:
            section = head
            out.append(f"\n  [{head or 'run'}]")
        out.append(f"  {key} = {value}")
        if doc:
            out.append(textwrap.fill(doc, width=100, initial_indent="      ", subsequent_indent="      "))
    out.append(
        "\n  algo.<field>: any hyperparameter of the chosen algorithm, e.g. algo.lr, algo.clip_eps_high,"
        "\n      algo.kl_coef, algo.entropy_coef (see `mazegym presets --algo grpo`)."
    )
    return "\n".join(out)


def _preset_from_argv(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        if a == "--preset" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--preset="):
            return a.split("=", 1)[1]
    from runners.config.presets import DEFAULT_PRESET

    return DEFAULT_PRESET


# --------------------------------------------------------------------------- commands
def cmd_train(args: argparse.Namespace) -> int:
    """SFT when needed, then RL; prints the before/after table and artifact paths."""
    from runners.config import validate
    from runners.config.plan import INSTALL_HINTS, describe_plan

    config = build_config(args)
    if args.dry_run:
        print(describe_plan(config, args.config_notes))
        return 0
    validate(config)
    for note in args.config_notes:
        print(note, flush=True)
    if config.runner.kind == "ray":
        try:
            from runners.distributed import ray_runner
        except ImportError as exc:
            raise ValueError(
                f"runner.kind=ray needs ray, which cannot be imported here ({exc}): {INSTALL_HINTS['ray']}"
            )
        if not hasattr(ray_runner, "train"):
            raise SystemExit(
                "runner.kind=ray: runners.distributed.ray_runner.train is not available in this build; "
                "use runner.kind=local"
            )
        result = ray_runner.train(config, command=_command(args))
    else:
        from runners.local import train

        result = train(config, command=_command(args))
    from runners.local import report

    print(report(result) if hasattr(result, "table") else result, flush=True)
    return 0


def _command(args: argparse.Namespace) -> str | None:
    """The command line that is running, as the run records it (``None`` when unknown)."""
    from runners.artifacts.report import command_line

    return command_line(args.argv) if getattr(args, "argv", None) is not None else None


def cmd_report(args: argparse.Namespace) -> int:
    """Write a run's self-contained HTML report."""
    from runners.artifacts.report import write_report

    out = write_report(args.run_dir, args.out, replays=args.replays)
    print(f"Report: {out}")
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    """Only the supervised stage; evaluates the result on the fixed set."""
    from runners.config import validate
    from runners.rollout.evaluate import format_table, write_json
    from runners.build import build_generator, prepare_base_model, run_sft
    from runners.train.steps import eval_step, set_threads

    config = build_config(args)
    validate(config)
    set_threads(config)
    target = run_sft(config)
    if args.no_eval:
        return 0
    if config.sft.mode == "full":
        generator = build_generator(config, target)
    else:
        generator = build_generator(config, prepare_base_model(config), target)
    result = eval_step(generator, config)
    write_json(Path(target).parent / "eval_sft.json", result)
    print(format_table({"SFT": result}))
    return 0


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
    from runners.config import (
        apply_config_file,
        apply_overrides,
        from_dict,
        override_keys,
        read_config_file,
        resolve_scheme,
        scheme_of,
        validate,
    )

    if args.preset is None:
        config = build_config(args)  # only for the default run dir
        run_dir = Path(args.run_dir or config.run_dir)
        saved = run_dir / "config.json"
        if saved.is_file():
            config = from_dict(read_run_config(saved))
            base = scheme_of(config)
            files = [read_config_file(path) for path in args.config]
            for data in files:
                apply_config_file(config, data)
            config.run_dir = str(run_dir)
            apply_overrides(config, list(args.overrides))
            note = resolve_scheme(config, base, override_keys(list(args.overrides), files))
            args.config_notes = [note] if note else []
            return config
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


def cmd_eval(args: argparse.Namespace) -> int:
    """Evaluate the run's latest checkpoint (or an adapter / a model) on the fixed set and held-out sets."""
    from mazegym.evalsets import EVAL_SETS
    from runners import atomic
    from runners.config import validate
    from runners.rollout.evaluate import format_table, write_json
    from runners.build import build_generator, resolve_weights
    from runners.train.steps import eval_step, set_threads

    config = eval_config(args)
    validate(config)
    set_threads(config)
    if args.temperature is not None:
        config.eval.temperature = args.temperature
    sets = args.sets.split(",") if args.sets else [config.maze.eval_set, *config.maze.heldout_sets]
    unknown = [name for name in sets if name not in EVAL_SETS]
    if unknown:
        raise ValueError(f"--sets: no eval set called {', '.join(unknown)}; choose from {', '.join(sorted(EVAL_SETS))}")
    if args.first is not None:
        config.eval.set_mazes = {name: args.first for name in sets}
    run_dir = Path(config.run_dir)
    out = Path(args.json) if args.json else run_dir / "eval" / "eval.json"
    weights = resolve_weights(config, args.checkpoint, args.adapter, args.model)
    atomic.check_writable(out)
    generator = build_generator(config, weights.model_dir, weights.adapter)
    results = {}
    for name in sets:
        mazes = min(config.eval.set_mazes.get(name, EVAL_SETS[name].count), EVAL_SETS[name].count)
        print(f"[eval] {name}: {mazes} mazes ...", flush=True)
        results[name] = eval_step(generator, config, name)
    write_json(
        out,
        {
            "evaluated": weights.label,
            "model": str(weights.model_dir),
            "adapter": str(weights.adapter) if weights.adapter else None,
            "results": results,
        },
    )
    print(f"Evaluated {weights.label} on model {weights.model_dir}")
    print(format_table(results))
    print(f"JSON: {out}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the policy ``mazegym eval`` would evaluate over HTTP (OpenAI-style chat completions) until Ctrl-C."""
    from runners.artifacts.serve import CHAT_PATH, MODEL_NAME, bind, load_policy, serve, url_of
    from runners.build import resolve_weights
    from runners.config import validate
    from runners.config.plan import INSTALL_HINTS, installed
    from runners.train.steps import set_threads

    for module in ("fastapi", "uvicorn"):
        if not installed(module):
            raise ValueError(
                f"mazegym serve needs FastAPI and uvicorn ({module} is not installed): {INSTALL_HINTS[module]}"
            )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"mazegym serve: warning: {args.host} is not loopback and the server has no authentication", flush=True)
    from mazegym.integrations.guards import allowed_hosts

    hosts = allowed_hosts(args.host, args.allow_host)
    args.run_dir = args.run_dir_arg
    config = eval_config(args)
    validate(config)
    set_threads(config)
    weights = resolve_weights(config, args.checkpoint, args.adapter, args.model)
    model_dir, adapter, label = weights.model_dir, weights.adapter, weights.label
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        raise ValueError(f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); pass --port") from None
    policy = load_policy(config, model_dir, adapter, label)
    url = url_of(sock)

    def ready() -> None:
        print(f"Serving {label} on model {model_dir} (engine {config.loop.engine})", flush=True)
        print(f"Listening on {url}  (POST {url}{CHAT_PATH}, model {MODEL_NAME!r}; Ctrl-C stops)", flush=True)
        print(f"Play the run's eval set against it: mazegym play-remote {url}", flush=True)

    serve(policy, sock, on_ready=ready, allowed_hosts=hosts)
    return 0


def cmd_serve_env(args: argparse.Namespace) -> int:
    """Serve VisMaze environments over OpenEnv (WebSocket sessions) until Ctrl-C."""
    from runners.config.plan import INSTALL_HINTS, installed

    if not installed("openenv"):
        raise ValueError(f"mazegym serve-env needs openenv-core, which is not installed: {INSTALL_HINTS['openenv']}")
    from mazegym.integrations.openenv_server import serve

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"mazegym serve-env: warning: {args.host} is not loopback and the server has no authentication")
    return serve(args)


def cmd_play_remote(args: argparse.Namespace) -> int:
    """Play a fixed eval set against a `mazegym serve` endpoint and print the eval table."""
    from runners import atomic
    from runners.artifacts.serve import play_remote
    from runners.rollout.evaluate import format_table, write_json

    if args.json:
        atomic.check_writable(Path(args.json))
    try:
        summary, _ = play_remote(args.url, args.eval_set, 0, args.first, timeout=args.timeout)
    except (ConnectionError, RuntimeError) as exc:
        raise ValueError(str(exc)) from None
    print(f"Played {summary['episodes']} mazes of {summary['set']!r} against {args.url} ({summary['served']})")
    print(format_table({summary["set"]: summary}))
    if args.json:
        write_json(args.json, summary)
        print(f"JSON: {args.json}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """A person plays a maze in the terminal (w/a/s/d or words) or in a window."""
    from mazegym.manual_control import play

    return play(
        size=args.size,
        max_moves=args.max_moves,
        seed=args.seed,
        eval_set=args.eval_set,
        index=args.index,
        window=args.window,
    )


def cmd_export(args: argparse.Namespace) -> int:
    """Write the adapter (and optionally a merged model) for vLLM or transformers."""
    from runners.artifacts.export import export

    config = build_config(args)
    out = export(config, checkpoint=args.checkpoint, out_dir=args.out, merged=args.merged, force=args.force)
    print(f"Exported to {out}\n" + (out / "SERVING.md").read_text())
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    """List presets (and, with --algo, an algorithm's hyperparameters)."""
    from runners.config import describe_fields
    from runners.config.presets import TRAINING_PRESETS, describe_preset

    if args.algo:
        import algos

        _load_plugins(args)

        cls = algos.config_class(args.algo)
        for key, value, doc in describe_fields(cls()):
            print(f"algo.{key} = {value}\n    {doc}")
        return 0
    for name in TRAINING_PRESETS:
        print(f"{name:<22} {describe_preset(name)}")
    return 0


# --------------------------------------------------------------------------- parser
def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argparse tree of every subcommand."""
    preset = _preset_from_argv(argv or [])
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="mazegym", description=DESCRIPTION, formatter_class=fmt)
    parser.add_argument("--version", action="version", version=f"mazegym {_version()}")
    sub = parser.add_subparsers(
        dest="command", metavar="{train,sft,eval,serve,serve-env,play-remote,report,play,export,submit,bench,presets}"
    )

    def epilog() -> str:
        try:
            return _fields_help(preset)
        except Exception as exc:  # an unknown --preset: the command itself reports it
            return f"(config keys unavailable: {exc})"

    # Only the command whose --help is asked lists its keys: building them loads the algorithms (torch).
    words = [a for a in argv or [] if not a.startswith("-")]
    help_for = words[0] if words and ("--help" in argv or "-h" in argv) else None

    def config_command(name: str, func: Callable[[argparse.Namespace], int], help: str, description: str):
        """A subcommand that takes a config (--preset/--config/--run-dir/KEY=VALUE); --help lists every key."""
        p = sub.add_parser(
            name, help=help, description=description, epilog=epilog() if name == help_for else None, formatter_class=fmt
        )
        _add_config_args(p)
        p.set_defaults(func=func)
        return p

    p = config_command(
        "train",
        cmd_train,
        help="SFT (if needed) then RL (GRPO by default); prints the before/after table",
        description="Run the main job: SFT on oracle demonstrations when no SFT checkpoint exists, then RL "
        "(any registered algorithm; GRPO by default), evaluation before and after, checkpoints.",
    )
    p.add_argument(
        "--resume", default=None, help="latest | none | PATH (default: latest when the run dir has checkpoints)"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the config and print the resolved plan; needs no GPU and loads nothing",
    )

    p = config_command(
        "sft",
        cmd_sft,
        help="only the supervised stage on BFS-oracle demonstrations",
        description="Supervised fine-tuning on oracle demonstrations (optionally with exploratory detours, "
        "sft.detours=N) in the conversation format RL uses; writes <run_dir>/sft and evaluates it.",
    )
    p.add_argument("--no-eval", action="store_true", help="skip the evaluation after SFT")

    p = config_command(
        "eval",
        cmd_eval,
        help="evaluate a checkpoint / adapter / model on the fixed and held-out sets",
        description="Greedy evaluation (solve rate from task reward only, SPL, invalid-action rate, mean moves, "
        "per size) of a checkpoint, an adapter or a model. Writes JSON and prints a table.",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="latest | PATH: evaluate the adapter of this RL checkpoint "
        "(default: the run's latest checkpoint, unless --adapter/--model)",
    )
    p.add_argument("--adapter", default=None, help="PEFT adapter directory to evaluate on top of the model")
    p.add_argument("--model", default=None, help="model directory (default: the model the run's RL started from)")
    p.add_argument(
        "--sets", default=None, help="comma-separated eval sets (default: maze.eval_set + maze.heldout_sets)"
    )
    p.add_argument(
        "--temperature", type=_non_negative(float), default=None, help="decoding temperature (default 0 = greedy)"
    )
    p.add_argument("--first", type=_positive_int, default=None, help="play only the first N mazes of each set")
    p.add_argument(
        "--json",
        default=None,
        type=output_file,
        help="where to write the JSON results (default <run_dir>/eval/eval.json)",
    )

    p = sub.add_parser(
        "report",
        help="write a run's HTML report (learning curves, eval grid, replays, config)",
        description="Write one self-contained HTML file (images embedded, no network, no script) from "
        "what a run dir holds: learning curves from metrics.jsonl, the fixed eval set as "
        "solved/failed thumbnails before and after RL, GIF replays of the trained agent "
        "from the per-maze eval records, the config, commands, versions and timings.",
        formatter_class=fmt,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (e.g. runs/cpu-maze-vlm)")
    p.add_argument(
        "--out", default=None, type=output_file, help="where to write the HTML (default RUN_DIR/report.html)"
    )
    p.add_argument(
        "--replays", type=_non_negative(int), default=3, help="GIF replays per outcome, solved and failed (default 3)"
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "play",
        help="play a maze yourself (terminal, or --window)",
        description="Play a maze: type w/a/s/d (or up/left/down/right) and Enter; q quits.",
        formatter_class=fmt,
    )
    p.add_argument("--size", type=int, default=9, help="grid side, odd (default 9, VisMaze-v0)")
    p.add_argument(
        "--max-moves", type=int, default=None, help="move limit (default: the registered env's, else 2*size)"
    )
    p.add_argument("--seed", type=_non_negative(int), default=None, help="maze seed (default: random)")
    p.add_argument("--eval-set", default=None, help="play maze --index of this fixed eval set instead")
    p.add_argument("--index", type=int, default=0, help="index into --eval-set")
    p.add_argument("--window", action="store_true", help="also show the image observation in a window (needs tkinter)")
    p.set_defaults(func=cmd_play)

    p = config_command(
        "export",
        cmd_export,
        help="export the adapter (and optionally a merged model) for vLLM / transformers",
        description="Copy the trained adapter in PEFT format next to the model it applies to, optionally merge "
        "it, and write SERVING.md with the vLLM and transformers commands.",
    )
    p.add_argument("--checkpoint", default="latest", help="latest | PATH (default: the newest valid checkpoint)")
    p.add_argument("--out", default=None, help="output directory (default <run_dir>/export)")
    p.add_argument("--merged", action="store_true", help="also write the model with the adapter merged in")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out even when it is a non-empty directory that holds no earlier export",
    )

    p = sub.add_parser(
        "serve",
        help="serve a run's trained policy over HTTP (OpenAI-style chat completions, loopback)",
        description="Load the policy `mazegym eval` would evaluate (the run's latest checkpoint, else its final "
        "adapter, else its SFT result) into the run's engine (loop.engine: hf, or vllm) and answer OpenAI-style "
        "POST /v1/chat/completions requests (images as base64 PNG data URLs; greedy unless temperature > 0) on "
        "loopback until Ctrl-C. `mazegym play-remote URL` plays mazes against it. See the SERVING.md that "
        "`mazegym export` writes.",
        formatter_class=fmt,
    )
    p.add_argument("run_dir_arg", metavar="RUN_DIR", help="the run directory (e.g. runs/cpu-maze-vlm)")
    p.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, e.g. loop.engine=vllm model.device=cuda"
    )
    p.add_argument("--checkpoint", default=None, help="latest | PATH (default: the run's latest valid checkpoint)")
    p.add_argument("--config", action="append", default=[], metavar="FILE", help="YAML or JSON config file")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 picks a free one)")
    from mazegym.integrations import add_allow_host, add_server_arguments

    add_allow_host(p)
    p.set_defaults(func=cmd_serve, preset=None, adapter=None, model=None)

    p = sub.add_parser(
        "serve-env",
        help="serve VisMaze environments over OpenEnv (WebSocket sessions, loopback)",
        description="Serve VisMaze envs with openenv-core's server: one env per WebSocket session (/ws), seeds, "
        "fixed eval sets, image and text observations, feedback text. Clients: "
        "mazegym.integrations.openenv_server.RemoteVisMazeEnv (a Gymnasium env) or any OpenEnv EnvClient. "
        "See docs/integrations.md.",
        formatter_class=fmt,
    )
    add_server_arguments(p)
    p.set_defaults(func=cmd_serve_env)

    p = sub.add_parser(
        "play-remote",
        help="play a fixed eval set against a `mazegym serve` endpoint (prints the eval table)",
        description="Play the mazes of a fixed eval set greedily against a `mazegym serve` endpoint over HTTP, with "
        "the rollout code `mazegym eval` uses, and print the same table (the moves equal the in-process "
        "evaluation's on the same model).",
        formatter_class=fmt,
    )
    p.add_argument("url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--eval-set", default=None, help="fixed eval set to play (default: the served run's maze.eval_set)")
    p.add_argument("--first", type=_non_negative(int), default=None, help="play only the set's first N mazes")
    p.add_argument("--timeout", type=_non_negative(float), default=120.0, help="seconds to wait for one reply")
    p.add_argument("--json", default=None, type=output_file, help="also write the summary and per-maze records here")
    p.set_defaults(func=cmd_play_remote)

    from runners.distributed.submit import add_submit_command

    add_submit_command(sub)

    from runners.bench.command import add_bench_command

    add_bench_command(sub)

    p = sub.add_parser("presets", help="list presets (or an algorithm's hyperparameters with --algo NAME)")
    p.add_argument("--algo", default=None, help="show this algorithm's config keys (algo.<key>=...)")
    _add_plugin_arg(p)
    p.set_defaults(func=cmd_presets)
    return parser


def _version() -> str:
    """The installed mazegym's version ("unknown" when it runs from a tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mazegym")
    except PackageNotFoundError:
        return "unknown"


def _non_negative(kind: type) -> Callable[[str], float | int]:
    """An argparse type: a finite number of ``kind`` that is >= 0 (argparse prints the usage and exits 2 otherwise)."""
    import math

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
        return value

    parse.__name__ = kind.__name__
    return parse


def _positive_int(text: str) -> int:
    """argparse type of a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def _port(text: str) -> int:
    """argparse type of a TCP port: 0 (a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return value


def output_file(text: str) -> str:
    """argparse type of an output *file* argument: refuses a path that is an existing directory, up front."""
    if Path(text).expanduser().is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; name the file to write inside it")
    return text


REPORTED_ERRORS = {
    "runners.train.sync": "AdapterSyncError",
    "runners.train.run_lock": "RunDirBusy",
    "runners.train.checkpoint": "CheckpointWriteError",
}
"""The runners' own errors that :func:`main` prints as one line, by module."""


def _reported_errors() -> tuple[type[BaseException], ...]:
    """The error types :func:`main` prints as one line: file and value errors, and :data:`REPORTED_ERRORS` of the
    modules the command loaded.

    Looked up when an error arrives rather than imported up front: those modules load torch, which would make every
    command (``--help`` included) pay for it, and an error of a module the command never loaded cannot have been raised.
    """
    loaded = [getattr(sys.modules[m], name) for m, name in REPORTED_ERRORS.items() if m in sys.modules]
    return (FileNotFoundError, FileExistsError, ValueError, *loaded)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mazegym`` script."""
    from runners.config import ConfigError

    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        if getattr(args, "command", None) == "serve" and all("=" in e and not e.startswith("-") for e in extra):
            # `serve RUN_DIR --port 0 loop.engine=vllm`: argparse gives the positionals only the words before the
            # first option, so KEY=VALUE words after an option come back unparsed; they are overrides all the same
            args.overrides = [*args.overrides, *extra]
        else:
            parser.parse_args(argv)  # argparse's own message for the unknown arguments, exit 2
    args.argv = argv
    if not getattr(args, "command", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        resume = " (rerun the same command to resume from the last checkpoint)" if args.command == "train" else ""
        print(f"mazegym {args.command}: interrupted (Ctrl-C){resume}", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"mazegym {args.command}: config error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        key = exc.args[0] if exc.args else "?"
        if isinstance(key, str) and " " in key:  # a lookup that explains itself (an unknown name and the choices)
            print(f"mazegym {args.command}: error: {key}", file=sys.stderr)
            return 2
        print(
            f"mazegym {args.command}: error (KeyError): missing key {key!r} in data this command read; the file is "
            f"probably from another mazegym version or damaged: rerun the step that wrote it",
            file=sys.stderr,
        )
        return 2
    except _reported_errors() as exc:
        print(f"mazegym {args.command}: error ({type(exc).__name__}): {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        from runners.config.plan import INSTALL_HINTS

        module = (exc.name or "").split(".")[0]
        if module not in INSTALL_HINTS:
            raise
        print(
            f"mazegym {args.command}: error: this needs {module}, which is not installed here: {INSTALL_HINTS[module]}",
            file=sys.stderr,
        )
        return 2
    except EOFError:
        print(f"mazegym {args.command}: the input ended (EOF) before the command finished", file=sys.stderr)
        return 1
    except RecursionError:
        print(
            f"mazegym {args.command}: error: a file this command read is nested too deeply to be one mazegym wrote "
            "(a damaged or hostile JSON file?); rerun the step that wrote it",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

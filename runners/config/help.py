"""The keys ``mazegym <cmd> --help`` lists, grouped by the part that owns them.

By default the help shows the settings every run has and the own settings of the parts the command line chose (the
model kind, the collector, the algorithm, the engine and the runner of its preset, files and overrides), each with
its value and its help; ``--help-all`` adds every registered part's own settings, at their defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
from typing import Any, Iterator, Sequence

from runners.config.overrides import field_docs
from runners.config.parts import SLOTS, Slot, chosen, own_fields, section
from runners.config.schema import TrainConfig

WIDTH = 100
"""Width of the help text."""


def _rows(obj: Any, prefix: str, fields: Sequence[dataclasses.Field]) -> Iterator[tuple[str, Any, str]]:
    """(dotted key, value, help) of ``fields`` of dataclass ``obj``, nested sections walked."""
    docs = field_docs(type(obj))
    for f in fields:
        value = getattr(obj, f.name)
        if f.metadata.get("provenance"):
            continue
        if dataclasses.is_dataclass(value):
            yield from _rows(value, f"{prefix}{f.name}.", dataclasses.fields(value))
        elif not f.metadata.get("algorithm"):
            yield f"{prefix}{f.name}", value, docs.get(f.name, "")


def _block(title: str, rows: Sequence[tuple[str, Any, str]]) -> list[str]:
    """One group of keys: its title, then each key with its value and help."""
    out = [f"\n  [{title}]"]
    for key, value, doc in rows:
        out.append(f"  {key} = {json.dumps(value, default=str)}")
        if doc:
            out.append(textwrap.fill(doc, width=WIDTH, initial_indent="      ", subsequent_indent="      "))
    if not rows:
        out.append("  (no settings of its own)")
    return out


def _slot_of_section(path: str) -> Slot | None:
    return next((slot for slot in SLOTS if slot.section == path), None)


def _generic_rows(config: TrainConfig, obj: Any = None, prefix: str = "") -> Iterator[tuple[str, list]]:
    """(group title, rows) of the settings every run has, section by section; each part's section is cut to the
    fields its slot's base declares."""
    obj = config if obj is None else obj
    top = [f for f in dataclasses.fields(obj) if not dataclasses.is_dataclass(getattr(obj, f.name))]
    if top and not prefix:
        yield "run", list(_rows(obj, "", top))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not dataclasses.is_dataclass(value) or f.metadata.get("provenance"):
            continue
        path = f"{prefix}{f.name}"
        slot = _slot_of_section(path)
        fields = dataclasses.fields(slot.base) if slot else dataclasses.fields(value)
        plain = [g for g in fields if not dataclasses.is_dataclass(getattr(value, g.name))]
        yield path, list(_rows(value, path + ".", plain))
        if not slot:
            yield from ((t, r) for t, r in _generic_rows(config, value, path + ".") if t != "run")


def _algorithm_rows(name: str, params: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """Every ``algo.<field>`` of algorithm ``name`` with its value (``params`` over the defaults)."""
    import algos

    cls = algos.config_class(name)
    defaults, docs = cls(), field_docs(cls)
    return [
        (f"algo.{f.name}", params.get(f.name, getattr(defaults, f.name)), docs.get(f.name, ""))
        for f in dataclasses.fields(cls)
    ]


def render_keys(config: TrainConfig, show_all: bool = False) -> str:
    """The keys of ``config``: the settings every run has and its chosen parts' own, grouped by part, with values and
    help; ``show_all`` adds every registered part's own settings (at their defaults)."""
    names = chosen(config)
    out: list[str] = []
    for title, rows in _generic_rows(config):
        out += _block(title, rows)
        slot = _slot_of_section(title)
        if slot:
            settings = section(config, slot.section)
            own = list(_rows(settings, slot.section + ".", own_fields(type(settings), slot)))
            out += _block(f"{slot.section}: {names[slot.key]} ({slot.what} {slot.key}={names[slot.key]})", own)
        if title == "algo":
            out += _block(
                f"algo: {config.algo.name} (its hyperparameters, algo.<field>=value)",
                _algorithm_rows(config.algo.name, config.algo.params),
            )
    if show_all:
        out += _other_parts(names)
    return "\n".join(out)


def _other_parts(names: dict[str, str]) -> list[str]:
    """Every registered part's own settings that the config did not choose, at their defaults."""
    import algos

    out = ["", "Every other part's own settings (defaults), chosen with its key:"]
    for slot in SLOTS:
        for name in slot.names():
            if name == names[slot.key]:
                continue
            settings = slot.settings(name)
            rows = list(_rows(settings, slot.section + ".", own_fields(type(settings), slot)))
            out += _block(f"{slot.section}: {name} ({slot.key}={name})", rows)
    for name in algos.available():
        if name != names["algo.name"]:
            out += _block(f"algo: {name} (algo.name={name})", _algorithm_rows(name, {}))
    return out


def keys_help(argv: Sequence[str], default_preset: str) -> str:
    """The epilog of a config-taking command's ``--help``: the keys of the config ``argv`` describes (its
    ``--preset``, ``--config`` files and ``KEY=VALUE`` words; the preset alone when they do not resolve), every
    part's with ``--help-all``; one line saying why when they cannot be listed (an unknown preset)."""
    from runners.config.overrides import build_config

    preset = _option(argv, "--preset") or default_preset
    files = [value for flag, value in zip(argv, list(argv[1:]) + [""]) if flag == "--config"]
    overrides = [a for a in argv if "=" in a and not a.startswith("-")]
    try:
        try:
            config, _ = build_config(preset, files, overrides=overrides)
        except ValueError:
            config, _ = build_config(preset)
    except Exception as exc:  # an unknown --preset: the command itself reports it
        return f"(config keys unavailable: {exc})"
    show_all = "--help-all" in argv
    head = (
        f"Config keys (KEY=VALUE overrides; values for preset {preset}"
        + (" and the given settings" if files or overrides else "")
        + "; the settings every run has, then the chosen parts' own"
        + ("; then every other part's" if show_all else "; --help-all lists every part's")
        + "):"
    )
    return head + "\n" + render_keys(config, show_all)


def _option(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``argv`` (``--flag VALUE`` or ``--flag=VALUE``)."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


class HelpAll(argparse.Action):
    """``--help-all``: print the command's help with every part's keys, then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        parser.print_help()
        parser.exit()


def add_help_all(parser: argparse.ArgumentParser) -> None:
    """Give a config-taking command ``--help-all``."""
    parser.add_argument(
        "--help-all", action=HelpAll, help="show this help with every part's keys, not only the chosen parts'"
    )

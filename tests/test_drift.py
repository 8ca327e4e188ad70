"""Prose that names the project's parts agrees with the code: every command, every algorithm, the default preset,
the step counts the preset listing states."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _alnum(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def test_the_cli_docstring_and_help_name_every_command():
    from runners import cli

    parser = cli.build_parser([])
    dispatched = set(next(a for a in parser._actions if a.dest == "command").choices)
    assert dispatched == set(cli.COMMANDS)
    out = subprocess.run(
        [sys.executable, "-m", "runners.cli", "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.startswith("    ") and line.split()}
    assert [c for c in cli.COMMANDS if f"mazegym {c} " not in cli.__doc__] == []
    assert dispatched <= listed
    assert len(out.stdout.splitlines()) < 40  # the commands one line each, not every command's options


def test_the_algos_docstring_names_every_builtin_algorithm():
    import algos
    from algos import registry

    doc = _alnum(algos.__doc__)
    assert set(registry._BUILTIN_MODULES) <= set(algos.available())
    assert [name for name in registry._BUILTIN_MODULES if _alnum(name) not in doc] == []


PROSE = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "deploy" / "README.md"]
PROSE += [
    p for d in ("runners", "mazegym", "algos", "scripts", "examples", "benchmarks") for p in (ROOT / d).rglob("*")
]
HISTORY = {"docs/research.md"}
"""Pages that record what was true then (a dated research log): they may name an earlier default."""


def default_preset_claims(text: str, presets: list[str]) -> list[str]:
    """Every preset name the text calls the default (``X (the default)``, ``X: the default``, ``default: X``,
    ``the default preset (X``)."""
    names = "|".join(sorted(map(re.escape, presets), key=len, reverse=True))
    quote = r"[`'\"*]*"
    patterns = [
        rf"{quote}({names}){quote}\s*\((?:is )?the default\b",
        rf"{quote}({names}){quote}:? (?:is )?the default\b",
        rf"\bdefault(?: preset)?:?\s+(?:is\s+)?\(?{quote}({names}){quote}(?![\w-])",
    ]
    flat = re.sub(r"\s+", " ", text)
    return [m.group(1) for pattern in patterns for m in re.finditer(pattern, flat)]


def test_texts_that_name_the_default_preset_name_the_real_one():
    from runners.config.presets import DEFAULT_PRESET, TRAINING_PRESETS

    wrong = {}
    for path in PROSE:
        name = path.relative_to(ROOT).as_posix()
        if path.suffix not in (".py", ".md", ".yaml", ".sh") or name in HISTORY or not path.is_file():
            continue
        claims = [c for c in default_preset_claims(path.read_text(errors="ignore"), list(TRAINING_PRESETS))]
        if any(c != DEFAULT_PRESET for c in claims):
            wrong[name] = claims
    assert wrong == {}


def test_the_default_preset_scan_finds_each_form():
    text = (
        "* ``cpu-tiny`` (the default): x\n# smoke: the default, y\n(default: cpu-maze-vlm; see)\n"
        "with the default preset (``cpu-tiny``: a\n`cpu-maze-loops` the default, `cpu-maze-vlm`\n"
    )
    presets = ["cpu-tiny", "smoke", "cpu-maze-vlm", "cpu-maze-loops"]
    found = default_preset_claims(text, presets)
    assert sorted(found) == ["cpu-maze-loops", "cpu-maze-vlm", "cpu-tiny", "cpu-tiny", "smoke"]


def test_a_preset_listing_states_its_own_step_count():
    """``mazegym presets`` shows each preset file's first sentence: a number of RL steps there is the preset's."""
    from runners.config.presets import TRAINING_PRESETS, describe_preset, get_preset

    stated = {name: re.findall(r"(\d+) (?:RL )?steps of", describe_preset(name)) for name in TRAINING_PRESETS}
    wrong = {n: s for n, s in stated.items() if any(int(v) != get_preset(n).loop.steps for v in s)}
    assert any(stated.values()) and wrong == {}


def _sections() -> list[str]:
    """The config's top-level sections (``maze``, ``model``, ...), read from the schema."""
    import dataclasses

    from runners.config import TrainConfig

    config = TrainConfig()
    return [f.name for f in dataclasses.fields(config) if dataclasses.is_dataclass(getattr(config, f.name))]


SECTIONS = _sections()
KEY_WRITTEN = re.compile(rf"(?<![\w.$-])((?:{'|'.join(SECTIONS)})\.[a-z_][a-z0-9_.]*)=")
"""A setting written as an override in prose or a script (``rollout.collector.moves_only=true``)."""


def every_settable_key() -> set[str]:
    """Every key some run can set: the generic schema's, every registered part's, every algorithm's ``algo.<field>``."""
    import dataclasses

    import algos
    from runners.config import TrainConfig, fields
    from runners.config.parts import SLOTS

    keys = {key for key, _, _ in fields.settings(TrainConfig())}
    for slot in SLOTS:
        for name in slot.names():
            keys |= {f"{slot.section}.{key}" for key, _, _ in fields.settings(slot.settings(name))}
    for name in algos.available():
        keys |= {f"algo.{f.name}" for f in dataclasses.fields(algos.config_class(name))}
    return keys


def test_every_key_the_docs_and_scripts_set_exists():
    """A renamed or removed key leaves no command in the docs, examples or scripts that the CLI would refuse."""
    keys = every_settable_key()
    unknown = {}
    for path in PROSE:
        name = path.relative_to(ROOT).as_posix()
        if path.suffix not in (".py", ".md", ".yaml", ".sh", ".jinja") or name in HISTORY or not path.is_file():
            continue
        text = path.read_text(errors="ignore")
        # a page that declares a plugin's settings (a field `fraction: float = 0.25`) may set them
        declared = {k for k in KEY_WRITTEN.findall(text) if re.search(rf"^ +{k.rsplit('.', 1)[1]}: \w", text, re.M)}
        written = set(KEY_WRITTEN.findall(text)) - declared
        if written - keys:
            unknown[name] = sorted(written - keys)
    assert unknown == {}


def test_the_key_scan_finds_overrides_and_nothing_else():
    text = "`mazegym train loop.seed=1 'maze.heldout_sets=[]' rollout.collector.moves_only=true` x.loop.y=2 a==b"
    assert KEY_WRITTEN.findall(text) == ["loop.seed", "maze.heldout_sets", "rollout.collector.moves_only"]
    assert "model.vision_locator" in every_settable_key() and "algo.vf_lr" in every_settable_key()

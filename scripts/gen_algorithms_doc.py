"""Write docs/algorithms.md from the algorithm registry: each algorithm's module docstring and its config fields.

    python scripts/gen_algorithms_doc.py            # rewrite docs/algorithms.md
    python scripts/gen_algorithms_doc.py --check    # exit 1 when the file is out of date (the tests run this)

The page is generated so it cannot drift from the code, in CleanRL's form per algorithm: usage (the
command), the rollout schemes it trains on (``rollout_schemes``; what choosing it on the default preset moves),
implementation details (the algorithm
module's docstring), settings (its ``Config`` dataclass: name, default, the docstring under the field),
logged metrics (the keys its update returns beyond GRPO's, found by running one update of the network
policy; every key is explained in docs/METRICS.md) and measured results (its row of the algorithm table
that ``benchmarks/algo_table.py --publish`` wrote to docs/assets).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from docgen import write_or_check  # noqa: E402

import algos  # noqa: E402
from algos.base import AlgorithmConfig  # noqa: E402
from runners.config import field_docs  # noqa: E402

DOC = ROOT / "docs" / "algorithms.md"
MEASURED = ROOT / "docs" / "assets" / "algo_table_cpu-maze-vlm.json"
"""The default preset's algorithm table, as ``benchmarks/algo_table.py --publish`` writes it."""


def schemes(name: str) -> str:
    """The rollout schemes ``name`` trains on, and what ``mazegym train algo.name=NAME`` does on the default preset."""
    from runners.config import apply_overrides, override_keys, resolve_scheme, scheme_of
    from runners.config.presets import DEFAULT_PRESET, get_preset
    from runners.config.schemes import SCHEME_NAMES

    supported = algos.rollout_schemes(name)
    config = get_preset(DEFAULT_PRESET)
    base, overrides = scheme_of(config), [f"algo.name={name}"]
    note = resolve_scheme(apply_overrides(config, overrides), base, override_keys(overrides))
    words = " and ".join(SCHEME_NAMES[s] for s in supported) + ("" if len(supported) > 1 else " only")
    if note is None:
        return f"{words[0].upper()}{words[1:]}."
    return (
        f"{words[0].upper()}{words[1:]}. On the default preset (`{DEFAULT_PRESET}`, {SCHEME_NAMES[base]}) "
        f"`mazegym train algo.name={name}` (and its `--dry-run`) moves the run there and prints `{note}`. Setting "
        "the scheme yourself to one it cannot train on is a config error naming `rollout.branching`."
    )


def update_keys(name: str) -> set[str]:
    """The metric keys one update of algorithm ``name`` returns (network policy, synthetic episodes)."""
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from test_algos import GRID, make_episodes

    from algos.policies.net import MazeNetPolicy

    torch.manual_seed(0)
    policy = MazeNetPolicy(GRID)
    return set(algos.make(name, policy, lr=1e-3).update(make_episodes(policy)))


def _pct(spread: dict | None) -> str:
    if not spread:
        return "-"
    if spread.get("ci95") is None:
        return f"{100 * spread['mean']:.1f}%"
    lo, hi = spread["ci95"]
    return f"{100 * spread['mean']:.1f}% [95% CI {100 * lo:.1f}-{100 * hi:.1f}%]"


def measured(name: str) -> str:
    """The algorithm's rows of the published algorithm table (one per rollout scheme), or a line saying there are
    none."""
    from runners.config.schemes import SCHEME_NAMES

    if not MEASURED.is_file():
        return "Not measured on the default preset yet (`benchmarks/algo_table.py --publish`)."
    data = json.loads(MEASURED.read_text())
    rows = [r for r in data["rows"] if r["algo"] == name and r.get("scheme")]
    if not rows:
        return f"Not in the published table (`{data['command']}`)."
    parts = []
    for row in rows:
        where = SCHEME_NAMES.get(row["scheme"], row["scheme"])
        if row.get("unsupported"):
            parts.append(f"on {where}: not run (it does not train there)")
            continue
        steps = (row.get("steps_run") or {}).get("mean", 0)
        before = "; ".join(f"{c['solved']}/{c['episodes']}" for c in row["before_counts"][:1]) or "-"
        parts.append(
            f"on {where}, {row['finished']} of {len(row['seeds'])} seeds: **{before} -> {_pct(row['after'])}** "
            f"after {steps:.0f} RL steps"
        )
    return (
        f"Default preset (`{data['preset']}`), greedy solve rate on the fixed 64 mazes from one SFT start, mean over "
        f"seeds with its 95% interval: {'; '.join(parts)}. Command: `{data['command']}` ({data['date']}); "
        "the README and benchmarks/README.md have the whole table."
    )


def _rows(fields: list, docs: dict[str, str]) -> list[str]:
    """One table row per dataclass field: name, default, the docstring under it."""
    rows = []
    for f in fields:
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        rows.append(f"| `{f.name}` | `{default!r}` | {docs.get(f.name, '').replace('|', '/')} |")
    return rows


def render() -> str:
    """The page's markdown."""
    base_docs = field_docs(AlgorithmConfig)
    lines = [
        "# Algorithms",
        "",
        "Generated by `python scripts/gen_algorithms_doc.py` from the registry (`algos.available()`); do not "
        "edit by hand.",
        f"The default is `{algos.registry.DEFAULT}`. Set any field as `algo.<field>=value` on the `mazegym "
        "train` command line,",
        "or pass it to `algos.make(name, policy, <field>=value)`. What every logged key means: "
        "[METRICS.md](METRICS.md).",
        "",
        "## Shared settings (`algos.base.AlgorithmConfig`)",
        "",
        "| field | default | meaning |",
        "|---|---|---|",
    ]
    lines += _rows(dataclasses.fields(AlgorithmConfig), base_docs)
    base_keys = update_keys(algos.registry.DEFAULT)
    for name in algos.available():
        cls = algos.get(name)
        module = inspect.getmodule(cls)
        lines += [
            "",
            f"## `{name}`",
            "",
            f'**Usage.** `mazegym train algo.name={name}`; in Python `algos.make("{name}", policy, <field>=value)`.',
            "",
            f"**Rollout schemes.** {schemes(name)}",
            "",
            "**Implementation details.**",
            "",
            inspect.cleandoc(module.__doc__ or cls.__doc__ or "").strip(),
            "",
        ]
        config = algos.config_class(name)
        docs = field_docs(config)
        own = [
            f
            for f in dataclasses.fields(config)
            if f.name not in {g.name for g in dataclasses.fields(AlgorithmConfig)}
            or f.default != next(g.default for g in dataclasses.fields(AlgorithmConfig) if g.name == f.name)
        ]
        if own:
            lines += [
                f"**Settings** of `{config.__name__}` beyond or different from the shared ones:",
                "",
                "| field | default | meaning |",
                "|---|---|---|",
            ]
            lines += _rows(own, docs)
            lines.append("")
        extra_keys = sorted(update_keys(name) - base_keys)
        lines.append(
            "**Logged metrics.** The shared `train/*` keys (docs/METRICS.md)"
            + (", plus " + ", ".join(f"`train/{k}`" for k in extra_keys) if extra_keys else "")
            + "."
        )
        lines += ["", "**Measured.** " + measured(name)]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Rewrite the page, or with ``--check`` say whether it is current."""
    return write_or_check(DOC, render, __doc__, "the registry")


if __name__ == "__main__":
    sys.exit(main())

"""The main-job tables, written from finished runs (one per seed), never typed by hand.

    python benchmarks/main_job_table.py runs/seed0 runs/seed1 runs/seed2             # print the tables
    python benchmarks/main_job_table.py runs/seed0 runs/seed1 runs/seed2 --publish   # and write them into the docs

Each run dir must hold what ``mazegym train`` leaves: ``config.json``, ``eval_results.json`` (the case-study set
before and after RL, the evaluations during RL, the held-out sets, timing, peak memory) and ``run_info.json`` (the
command, the source commit and the machine's calibration). A held-out set a run did not evaluate reads "-".
``--publish`` replaces the text between ``<!-- main-job:start -->`` and ``<!-- main-job:end -->``: in README.md with
the short table (one row per seed, the lift and what it kept), in docs/rl-earns-its-lift.md with the full one; and
it writes what both were made from to ``docs/assets/main_job.json``, so a test can check the pages against it.
``--section NAME`` publishes a variant's runs instead (e.g. ``sizes``, the runs of ``cpu-maze-loops-sizes``): the full
table alone, between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` of the docs page, from
``docs/assets/NAME.json`` (dashes as underscores); the README keeps the main job's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def markers(section: str) -> tuple[str, str]:
    """The start and end markers of a published section."""
    return f"<!-- {section}:start -->", f"<!-- {section}:end -->"


START, END = markers("main-job")
LOOPS = ("fresh-loops-9x9", "loops-13x13", "loops-21x21")
PERFECT = ("heldout-5x5", "heldout-7x7", "VisMaze-Hard-v0", "heldout-13x13", "heldout-17x17", "heldout-21x21")


def load_run(run: Path) -> dict:
    """What the tables read from one finished run dir."""
    missing = [name for name in ("eval_results.json", "config.json", "run_info.json") if not (run / name).is_file()]
    if missing:
        raise SystemExit(f"{run}: no {', '.join(missing)}; pass the dirs of finished `mazegym train` runs")
    results = json.loads((run / "eval_results.json").read_text())
    config = json.loads((run / "config.json").read_text())
    info = json.loads((run / "run_info.json").read_text())
    return {"results": results, "config": config, "invocation": info["invocations"][-1]}


def count(summary: dict | None) -> str:
    """``solved/played`` of one evaluation summary, or "-"."""
    return "-" if not summary else f"{summary['solved']}/{summary['episodes']}"


def percent(summary: dict | None) -> str:
    """The solve rate of one evaluation summary in whole percent, or "-"."""
    return "-" if not summary else f"{100 * summary['solved'] / summary['episodes']:.0f}%"


def row(run: dict) -> str:
    """One seed's row of the table."""
    results, config = run["results"], run["config"]
    heldout = results.get("heldout", {})
    before, after = results["before_rl"], results["after_rl"]
    history = ", ".join(f"{round(64 * e['solve_rate'])}" for e in results["eval_history"] if e["step"] > 0)
    timing = results["timing"]
    calibration = run["invocation"].get("calibration", {}).get("units_per_s", float("nan"))
    cells = [
        str(config["loop"]["seed"]),
        f"{count(before)} -> **{count(after)}**",
        history,
        count(heldout.get("VisMaze-v0")),
        " / ".join(percent(heldout.get(name)) for name in LOOPS),
        " / ".join(percent(heldout.get(name)) for name in PERFECT),
        f"{results['seconds'] / 60:.1f} min (RL {timing['rl_seconds'] / 60:.1f} min, {timing['rl_steps_per_s']:.3f} "
        f"steps/s), calibration {calibration:.1f}",
        f"{results['peak_rss_gb']:.2f} GiB",
        f"`{run['invocation']['command']}`",
    ]
    return "| " + " | ".join(cells) + " |"


def table(runs: list[dict], run_dirs: list[str], section: str = "main-job") -> str:
    """The markdown table of ``runs`` (read from ``run_dirs``, published as ``section``) and its caption."""
    eval_set = runs[0]["results"]["eval_set"]
    head = (
        f"| seed | `{eval_set}`: SFT start -> after RL | during RL (steps 5, 10, ...) | `VisMaze-v0` after RL "
        "| loops: fresh 9x9 (1000) / 13x13 / 21x21 | perfect: 5x5 / 7x7 / 11x11 / 13x13 / 17x17 / 21x21 "
        "| wall time of the command | peak RSS | command |"
    )
    lines = [head, "|" + "---|" * 9] + [row(run) for run in runs]
    lines.append("")
    lines.append(
        "Written by `python benchmarks/main_job_table.py "
        + " ".join(run_dirs)
        + ("" if section == "main-job" else f" --section {section}")
        + " --publish` from the runs' `eval_results.json`. Greedy; 13x13 and larger sets as the preset plays them "
        "(`eval.set_mazes`: the first 32 mazes of the 17x17 and 21x21 sets), the encoder run "
        "`ceil(20 x (size / 9)^2)` iterations. The calibration is `run_info.json`'s one-second measure of the machine "
        "(units/s on one thread; the reference machine reads about 10); a command with `sft.checkpoint=` "
        "started from an SFT model it did not train, so its wall time is RL and evaluation only."
    )
    return "\n".join(lines)


def short_row(run: dict) -> str:
    """One seed's row of the README's table."""
    results = run["results"]
    heldout = results.get("heldout", {})
    calibration = run["invocation"].get("calibration", {}).get("units_per_s", float("nan"))
    cells = [
        str(run["config"]["loop"]["seed"]),
        f"{count(results['before_rl'])} -> **{count(results['after_rl'])}**",
        count(heldout.get("VisMaze-v0")),
        percent(heldout.get("fresh-loops-9x9")),
        f"{results['timing']['rl_seconds'] / 60:.1f} min at calibration {calibration:.1f}",
        f"`{run['invocation'].get('commit') or '-'}`",
    ]
    return "| " + " | ".join(cells) + " |"


def short_table(runs: list[dict], run_dirs: list[str]) -> str:
    """The README's table of ``runs``: per seed the lift on the case-study set, the perfect-maze set after RL, the
    fresh loop mazes, the RL time and the source commit; the command under it."""
    eval_set = runs[0]["results"]["eval_set"]
    lines = [
        f"| seed | `{eval_set}`: SFT start -> after RL | `VisMaze-v0` after RL | 1000 fresh loop mazes | RL time "
        "| commit |",
        "|---|---|---|---|---|---|",
        *[short_row(run) for run in runs],
        "",
        "Greedy solve rates. Runs: `" + "`, `".join(run["invocation"]["command"] for run in runs) + "`. Table: "
        "`python benchmarks/main_job_table.py " + " ".join(run_dirs) + " --publish`. The calibration is the "
        "machine's speed (the reference machine reads about 10); the full table, larger mazes included: "
        "[docs/rl-earns-its-lift.md](docs/rl-earns-its-lift.md).",
    ]
    return "\n".join(lines)


def publish(text: str, readme: Path, start: str = START, end: str = END) -> None:
    """Replace the text between the markers ``start`` and ``end`` (the main job's) of ``readme`` with ``text``."""
    from runners.atomic import write_text

    page = readme.read_text()
    if start not in page or end not in page:
        raise SystemExit(f"{readme} has no {start} ... {end} markers")
    head, rest = page.split(start, 1)
    _, tail = rest.split(end, 1)
    write_text(readme, f"{head}{start}\n{text}\n{end}{tail}")


SNAPSHOT = ROOT / "docs" / "assets" / "main_job.json"
"""What the published tables were made from."""


def snapshot_path(section: str) -> Path:
    """Where a section's snapshot is kept."""
    return ROOT / "docs" / "assets" / f"{section.replace('-', '_')}.json"


def summarised(results: dict) -> dict:
    """What the tables read of an ``eval_results.json``: counts, not per-maze records."""
    counts = lambda s: None if not s else {k: s[k] for k in ("solved", "episodes", "solve_rate")}  # noqa: E731
    keep = {k: results.get(k) for k in ("eval_set", "eval_history", "seconds", "peak_rss_gb")}
    keep["timing"] = {k: results["timing"][k] for k in ("rl_seconds", "rl_steps_per_s")}
    keep.update(before_rl=counts(results["before_rl"]), after_rl=counts(results["after_rl"]))
    keep["heldout"] = {name: counts(s) for name, s in results.get("heldout", {}).items()}
    return keep


def render(snapshot: dict) -> tuple[str, str]:
    """(the README's table, the full table) of a snapshot ``{"runs", "run_dirs"}``."""
    section = snapshot.get("section", "main-job")
    return short_table(snapshot["runs"], snapshot["run_dirs"]), table(snapshot["runs"], snapshot["run_dirs"], section)


def main(argv: list[str] | None = None) -> int:
    """Print the tables of the given runs; with ``--publish``, also write them into the docs."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="finished run dirs, one per seed")
    parser.add_argument("--publish", action="store_true", help="write the tables into the docs")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--full", type=Path, default=ROOT / "docs" / "rl-earns-its-lift.md")
    parser.add_argument("--snapshot", type=Path, default=None, help="default: docs/assets/SECTION.json")
    parser.add_argument(
        "--section",
        default="main-job",
        help="the markers' name: main-job (README and docs) or a variant's section of the docs page alone",
    )
    args = parser.parse_args(argv)
    runs = [load_run(run) for run in args.runs]
    snapshot = {
        "runs": [
            {
                "results": summarised(run["results"]),
                "config": {"loop": {"seed": run["config"]["loop"]["seed"]}},
                "invocation": {k: run["invocation"].get(k) for k in ("command", "commit", "calibration")},
            }
            for run in runs
        ],
        "run_dirs": [str(run) for run in args.runs],
        **({} if args.section == "main-job" else {"section": args.section}),
    }
    short, full = render(snapshot)
    print(short + "\n\n" + full)
    if args.publish:
        from runners.atomic import write_json

        if args.section == "main-job":
            publish(short, args.readme)
        publish(full, args.full, *markers(args.section))
        write_json(args.snapshot or snapshot_path(args.section), snapshot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

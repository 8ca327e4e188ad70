"""``mazegym bench``: algorithms x tracks x seeds, run, measured and published.

Builds each track's start once, runs every cell (skipping finished ones, resuming interrupted ones) on
``parallel`` processes at a time with a progress bar over cells, then writes ``OUT/results.json``, ``OUT/results.csv``,
``OUT/results.md`` and ``OUT/<track>.png``. ``publish`` puts the tables between ``<!-- bench:start -->`` and
``<!-- bench:end -->`` of the README and benchmarks/README.md, the figures in docs/assets and the statistics in
``docs/assets/bench.json`` (which docs/algorithms.md is generated from).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from runners import atomic
from runners.bench import results
from runners.bench.cells import Cell, build_start, cell_dir, read_record, run_cell
from runners.bench.tracks import DEFAULT_TRACKS, TRACKS, Track, track

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_SEEDS = 5
"""Seeds per algorithm and track: the runs each interval is computed from."""
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
"""The markers of the published block."""


def list_tracks() -> str:
    """The text of ``mazegym bench --list``: every track, its budget and its one-line description."""
    lines = []
    for t in TRACKS.values():
        default = " (default)" if t.name in DEFAULT_TRACKS else ""
        lines.append(f"{t.name:8} {t.description}{default}")
        lines.append(f"{'':8} preset {t.preset}, {t.scheme}, {t.rl_steps} RL steps or {t.env_turns} environment turns")
    return "\n".join(lines)


def check_algos(algos: Sequence[str]) -> None:
    """Refuse an algorithm the registry does not know (after ``--plugin`` files registered theirs)."""
    import algos as registry

    known = registry.available()
    for name in algos:
        if name not in known:
            raise ValueError(f"--algos: unknown algorithm {name!r}; registered: {', '.join(known)}")


def run_benchmark(
    tracks: Sequence[str],
    algos: Sequence[str],
    seeds: Sequence[int],
    out: Path,
    parallel: int = 2,
    smoke: bool = False,
    plugins: Sequence[str] = (),
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, Any]:
    """Run every cell of ``tracks x algos x seeds`` into ``out`` and write the results; returns ``results.json``'s
    content."""
    import algos as registry

    chosen = [track(name) for name in tracks]
    check_algos(algos)
    plugins = [str(Path(p).resolve()) if Path(p).is_file() else p for p in plugins]
    starts = {t.name: build_start(t, out, smoke, plugins, log) for t in chosen}
    cells = [Cell(t, a, s) for t in chosen for a in algos for s in seeds if t.scheme in registry.rollout_schemes(a)]
    records = run_cells(cells, out, starts, smoke, plugins, parallel, progress, log)
    failed = [c.label for c in cells if records[c].get("rc") != 0]
    if failed:
        log(f"[bench] {len(failed)} run(s) failed (their rows say so; logs in their run dirs): {', '.join(failed)}")
    data = collect(chosen, algos, seeds, out, records)
    data["meta"] = {
        "tracks": list(tracks),
        "algos": list(algos),
        "seeds": list(seeds),
        "smoke": smoke,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    write_results(out, data)
    return data


def run_cells(
    cells: list[Cell],
    out: Path,
    starts: dict[str, Path | None],
    smoke: bool,
    plugins: list[str],
    parallel: int,
    progress: bool,
    log: Callable[[str], None],
) -> dict[Cell, dict[str, Any]]:
    """Run ``cells`` on ``parallel`` processes at a time, with a progress bar over cells and the time left."""
    from tqdm.auto import tqdm

    bar = tqdm(total=len(cells), desc="bench", unit="run", disable=not progress, dynamic_ncols=True)

    def one(cell: Cell) -> tuple[Cell, dict[str, Any]]:
        record = run_cell(cell, out, starts[cell.track.name], smoke, plugins)
        if not record.get("reused"):
            log(f"[bench] {cell.label}: exit {record['rc']}, {record['wall_s'] / 60:.1f} min")
        bar.update(1)
        return cell, record

    pool = ThreadPoolExecutor(max_workers=max(1, parallel))
    try:
        futures = [pool.submit(one, cell) for cell in cells]
        return dict(f.result() for f in futures)
    finally:
        # On Ctrl-C the running children get the signal too; the queued cells must not start.
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()


def collect(
    tracks: list[Track], algos: Sequence[str], seeds: Sequence[int], out: Path, records: dict[Cell, dict[str, Any]]
) -> dict[str, Any]:
    """Every run's measurements and every track's statistics."""
    import algos as registry

    runs, summaries = [], {}
    for t in tracks:
        by_algo: dict[str, list[dict[str, Any]]] = {}
        unsupported = [a for a in algos if t.scheme not in registry.rollout_schemes(a)]
        for a in algos:
            if a in unsupported:
                continue
            for s in seeds:
                cell = Cell(t, a, s)
                run = results.read_run(
                    cell_dir(cell, out), records.get(cell) or read_record(cell_dir(cell, out) / "bench.json")
                )
                run.update(track=t.name, algo=a, seed=s)
                by_algo.setdefault(a, []).append(run)
                runs.append(run)
        summaries[t.name] = results.track_stats(t, by_algo, unsupported)
        summaries[t.name]["table"] = results.track_markdown(summaries[t.name], by_algo)
    return {"tracks": summaries, "runs": runs}


def write_results(out: Path, data: dict[str, Any]) -> None:
    """``results.json``, ``results.csv``, ``results.md`` and one figure per track into ``out``."""
    atomic.write_json(out / "results.json", data)
    atomic.write_text(out / "results.csv", results.csv_text(data["runs"]))
    atomic.write_text(out / "results.md", markdown(data))
    for name, summary in data["tracks"].items():
        if any("final" in a for a in summary["algos"].values()):
            results.plot_track(summary, out / f"{name}.png")


def markdown(data: dict[str, Any], command: str | None = None) -> str:
    """Every track's table, with the protocol in one paragraph and the command that made them."""
    meta = data.get("meta", {})
    seeds = len(meta.get("seeds", []))
    head = (
        f"Each row: {seeds} seeds (runs) of one algorithm from the track's start checkpoint, same maze stream and "
        "budget for every algorithm. *final IQM*: interquartile mean of the runs' final greedy solve rates on the "
        "track's eval set, with its 95% stratified-bootstrap interval; *P(> grpo)*: probability that a run of the "
        "algorithm beats a run of GRPO (Mann-Whitney), with its interval; each seed's own count carries its Wilson "
        "interval on the eval set. A track is *saturated* when every algorithm's interval reaches 95% within a "
        f"quarter of its budget of turns. {meta.get('date', '')}"
    )
    if command:
        head = f"Command: `{command}`\n\n" + head
    return head + "\n\n" + "\n\n".join(s["table"] for s in data["tracks"].values()) + "\n"


def summary_markdown(data: dict[str, Any], command: str) -> str:
    """One table for the README: an algorithm per row, a track per column, each cell the final IQM with its 95%
    interval; each track's start and whether it is saturated under its name."""
    tracks = data["tracks"]
    algos = list(dict.fromkeys(a for s in tracks.values() for a in [*s["algos"], *s["unsupported"]]))
    seeds = len(data.get("meta", {}).get("seeds", []))
    head = " | ".join(
        f"`{name}`{' (saturated)' if s['saturated'] else ''}, start {results.pct(_start(s))}"
        for name, s in tracks.items()
    )
    lines = [f"| algo | {head} |", "|---|" + "---|" * len(tracks)]
    for algo in algos:
        cells = []
        for s in tracks.values():
            entry = s["algos"].get(algo, {})
            cells.append(
                "not run" if algo in s["unsupported"] else results.interval(entry["final"]) if "final" in entry else "-"
            )
        lines.append(f"| {algo} | {' | '.join(cells)} |")
    return (
        "\n".join(lines)
        + f"\n\nFinal greedy solve rate on each track's eval set, interquartile mean over {seeds} seeds [95% "
        "stratified-bootstrap interval]; *not run*: the algorithm does not train on the track's rollout scheme. "
        f"Command: `{command}` ({data.get('meta', {}).get('date', '')}). Per-seed counts, turns, the probability of "
        "improvement over GRPO and the curves: [benchmarks/README.md](benchmarks/README.md).\n"
    )


def _start(summary: dict[str, Any]) -> float | None:
    """The solve rate of a track's start checkpoint (the same for every algorithm)."""
    starts = [a["start"] for a in summary["algos"].values() if "start" in a]
    return starts[0] if starts else None


def publish(out: Path, data: dict[str, Any], command: str, pages: Sequence[Path], assets: Path) -> None:
    """Write the tables and figures where the docs read them (between the markers of each page of ``pages``; a page
    called README.md at the root gets the one-table summary, the others every table and figure)."""
    for name in data["tracks"]:
        if (out / f"{name}.png").is_file():
            atomic.write_bytes(assets / f"bench_{name}.png", (out / f"{name}.png").read_bytes())
    for page in pages:
        text = page.read_text()
        start, end = text.find(START), text.find(END)
        if start < 0 or end < start:
            raise ValueError(f"{page} has no {START} ... {END} block to publish into")
        if page.parent == ROOT:
            body = summary_markdown(data, command)
        else:
            pictures = [
                f"![track {name}: learning curves, final IQM, P(> grpo), performance profile]"
                f"({Path(os.path.relpath(assets / f'bench_{name}.png', page.parent)).as_posix()})"
                for name in data["tracks"]
                if (assets / f"bench_{name}.png").is_file()
            ]
            body = markdown(data, command) + "\n" + "\n".join(pictures) + "\n"
        atomic.write_text(page, text[: start + len(START)] + "\n" + body + text[end:])
    keep = {"command": command, "meta": data.get("meta", {}), "tracks": data["tracks"]}
    atomic.write_text(assets / "bench.json", json.dumps(keep, indent=1))

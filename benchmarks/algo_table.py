"""The algorithm table: every algorithm of the zoo from one SFT checkpoint, same budget, several seeds.

Makes one SFT model (``mazegym sft``, or reuses ``--sft``), then runs ``mazegym train`` once per
algorithm x seed as a subprocess (a crash is recorded, not fatal), and writes ``OUT/table.md``,
``OUT/table.json`` and ``OUT/curves.png`` (eval solve rate vs RL step, mean and min-max over seeds).
A finished run (``OUT/<algo>/seed<S>/bench.json`` with exit code 0 and the same command) is reused and
any other is rerun from scratch, so an interrupted table resumes where it stopped.

    python benchmarks/algo_table.py --preset cpu-tiny --seeds 0 1 2 --out runs/algo-table
    python benchmarks/algo_table.py --smoke --algos grpo ppo --seeds 0 --out /tmp/algo-smoke

``--publish`` also writes the results where the docs read them: the table between
``<!-- algo-table:start -->`` and ``<!-- algo-table:end -->`` in benchmarks/README.md, the curves as
``docs/assets/algo_table_<preset>.png`` and the aggregate as ``docs/assets/algo_table_<preset>.json``
(``scripts/gen_algorithms_doc.py`` puts each algorithm's measured row on docs/algorithms.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: the tree's own mazegym
    sys.path.insert(0, str(ROOT))

from mazegym.stats import format_interval, wilson_interval  # noqa: E402

ALGOS = ["grpo", "ppo", "rloo", "dr_grpo", "dapo", "gigpo"]
# Settings an algorithm needs beyond the preset's. PPO's critic must see every episode, so the preset's
# zero-variance filter (a GRPO setting) is turned off; DAPO's dynamic sampling *is* that filter, and its
# clip-higher (0.2/0.28) and token-mean loss are DAPOConfig's defaults; GiGPO needs nothing extra.
ALGO_OVERRIDES = {"ppo": ["algo.filter_zero_variance=false"], "dapo": ["algo.filter_zero_variance=true"]}
# On the default preset PPO cannot use branching rollouts (its critic is trained on whole plays; `mazegym train`
# moves it to these settings itself, the table names them), so it plays the preset's 20-move episodes; a step holds
# ~17 turns per episode instead of one per branch, so it plays 8 mazes x 8 rollouts instead of 64 mazes
# (about 20 s per step on one core instead of ~170 s) and every turn is kept (no zero-advantage skipping).
PRESET_ALGO_OVERRIDES = {
    ("cpu-maze-vlm", "ppo"): [
        "rollout.branching=false",
        "loop.overlap_generation=false",
        "algo.skip_zero_advantage=false",
        "algo.filter_zero_variance=false",
        "loop.mazes_per_step=8",
    ],
}


def algo_overrides(preset: str, algo: str) -> list[str]:
    """The settings ``algo`` needs beyond ``preset``'s (applied before the table's own overrides)."""
    return [*ALGO_OVERRIDES.get(algo, []), *PRESET_ALGO_OVERRIDES.get((preset, algo), [])]


SMOKE = ["sft.steps=20", "loop.mazes_per_step=2", "rollout.group_size=2", "eval.every=1"]
SMOKE_STEPS = 2


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the table from other users
    os.replace(tmp, path)


def run_child(args: list[str], log: Path) -> dict:
    """Run ``python -m runners.cli ARGS`` with this tree on PYTHONPATH; returns exit code, wall s, peak RSS MB."""
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    cmd = [sys.executable, "-m", "runners.cli", *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    start, t0 = time.time(), time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        # wait4 on this pid gives this child's own rusage; RUSAGE_CHILDREN would be the max over all runs.
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "cmd": cmd,
        "rc": proc.returncode,
        "start": start,
        "wall_s": time.perf_counter() - t0,
        "peak_rss_mb": usage.ru_maxrss / 1024,
    }  # Linux reports ru_maxrss in KiB


def read_run(run_dir: Path, bench: dict) -> dict:
    """One run's measured record: bench.json fields + before/after solve rates + the eval curve (step, rate, s)."""
    rec = {k: bench[k] for k in ("algo", "seed", "rc", "wall_s", "peak_rss_mb")}
    rec.update(before=None, after=None, solved_before=None, solved_after=None, episodes=None, curve=[])
    results, metrics = run_dir / "eval_results.json", run_dir / "metrics.jsonl"
    if results.is_file():
        res = json.loads(results.read_text())
        for when, key in (("before", "before_rl"), ("after", "after_rl")):
            if res.get(key):
                rec[when], rec[f"solved_{when}"] = res[key]["solve_rate"], res[key]["solved"]
                rec["episodes"] = res[key]["episodes"]
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            m = json.loads(line)
            if "eval/solve_rate" in m and m["phase"] in ("eval", "rl"):
                rec["curve"].append([m["step"], m["eval/solve_rate"], m["time"] - bench["start"]])
    return rec


def spread(values: list[float]) -> dict | None:
    """Mean, min, max and sample std (None for one value) of ``values``; None when empty."""
    if not values:
        return None
    std = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "std": std, "n": len(values)}


def counts(runs: list[dict], when: str) -> list[dict]:
    """Per finished seed, the eval set's ``solved`` of ``episodes`` ``when`` ("before"/"after" RL) and its 95% Wilson
    interval ``ci95`` (seeds whose results carry no counts are left out)."""
    out = []
    for r in runs:
        solved, episodes = r.get(f"solved_{when}"), r.get("episodes")
        if isinstance(solved, int) and isinstance(episodes, int) and 0 <= solved <= episodes:
            out.append({"seed": r["seed"], "solved": solved, "episodes": episodes})
            out[-1]["ci95"] = list(wilson_interval(solved, episodes))
    return out


def fmt_counts(counts: list[dict], same: bool = False) -> str:
    """``31/64 (36.6-60.4%)`` per seed, joined by ``; ``; with ``same``, one such entry when every seed has it."""
    texts = [f"{c['solved']}/{c['episodes']} ({format_interval(c['solved'], c['episodes'])})" for c in counts]
    if same and texts and len(set(texts)) == 1:
        return texts[0]
    return "; ".join(texts) or "-"


def to_threshold(curve: list[list[float]], threshold: float) -> tuple[int, float] | None:
    """(RL step, seconds since the run started) of the first evaluation at or above ``threshold``, else None."""
    return next(((step, sec) for step, rate, sec in curve if rate >= threshold), None)


def aggregate(runs: list[dict], threshold: float = 0.95) -> list[dict]:
    """One row per algorithm (in first-seen order): spreads over its finished seeds, and failed seeds."""
    rows = []
    for algo in dict.fromkeys(r["algo"] for r in runs):
        mine = [r for r in runs if r["algo"] == algo]
        ok = [r for r in mine if r["rc"] == 0 and r["after"] is not None]
        hits = [h for h in (to_threshold(r["curve"], threshold) for r in ok) if h is not None]
        rows.append(
            {
                "algo": algo,
                "seeds": [r["seed"] for r in mine],
                "finished": len(ok),
                "failed": [r["seed"] for r in mine if r not in ok],
                "before": spread([r["before"] for r in ok if r["before"] is not None]),
                "after": spread([r["after"] for r in ok]),
                "before_counts": counts(ok, "before"),
                "after_counts": counts(ok, "after"),
                "reached": len(hits),
                "steps_run": spread([r["curve"][-1][0] for r in ok if r["curve"]]),
                "steps_to_threshold": spread([h[0] for h in hits]),
                "seconds_to_threshold": spread([h[1] for h in hits]),
                "wall_s": spread([r["wall_s"] for r in mine]),
                "peak_rss_mb": spread([r["peak_rss_mb"] for r in mine]),
            }
        )
    return rows


def fmt(s: dict | None, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
    """``mean (min-max, sd std)`` of a spread, scaled; ``-`` when there is nothing."""
    if s is None:
        return "-"
    m, lo, hi, sd = (None if s[k] is None else f"{s[k] * scale:.{digits}f}" for k in ("mean", "min", "max", "std"))
    return f"{m}{unit}" if s["n"] == 1 else f"{m}{unit} ({lo}-{hi}{unit}, sd {sd}{unit})"


def markdown(rows: list[dict], meta: dict) -> str:
    """The table as Markdown, with the command and settings that produced it."""
    thr = f"{meta['threshold']:.0%}"
    lines = [
        f"# Algorithm table: preset `{meta['preset']}`",
        "",
        f"Command: `{meta['command']}`  ",
        f"SFT start: `{meta['sft']}`; overrides: `{' '.join(meta['overrides'])}`  ",
        f"Greedy solve rate on the preset's eval set; mean (min-max, sd) over finished seeds. The solved columns give "
        "each finished seed's count with its 95% Wilson interval on the eval set (61/64 is 87.1-98.4%): one seed's "
        f"difference inside it is a maze or two, not a result. {meta['date']}",
        "",
        f"| algo | seeds ok | before RL | solved before RL | after RL | solved after RL, per seed | RL steps "
        f"| steps to {thr} | wall to {thr} | wall per run | peak RSS |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ok = f"{r['finished']}/{len(r['seeds'])}" + (f" (failed: {r['failed']})" if r["failed"] else "")
        steps = fmt(r["steps_to_threshold"])
        reach = "not reached" if not r["reached"] else f"{steps} ({r['reached']}/{r['finished']} seeds)"
        secs = "not reached" if not r["reached"] else fmt(r["seconds_to_threshold"], 1 / 60, 1, " min")
        lines.append(
            f"| {r['algo']} | {ok} | {fmt(r['before'], 100, 1, '%')} | {fmt_counts(r.get('before_counts', []), True)} "
            f"| {fmt(r['after'], 100, 1, '%')} | {fmt_counts(r.get('after_counts', []))} | "
            f"{fmt(r.get('steps_run'), 1, 0)} | {reach} | {secs} | {fmt(r['wall_s'], 1 / 60, 1, ' min')} | "
            f"{fmt(r['peak_rss_mb'], 1 / 1024, 2, ' GB')} |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path, title: str) -> None:
    """Eval solve rate vs RL step per algorithm: mean line and min-max band over seeds (steps all seeds share)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algo in dict.fromkeys(r["algo"] for r in runs):
        curves = [{s: v for s, v, _ in r["curve"]} for r in runs if r["algo"] == algo and r["curve"]]
        steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        if not steps:
            continue
        vals = [[c[s] * 100 for c in curves] for s in steps]
        (line,) = ax.plot(steps, [statistics.fmean(v) for v in vals], marker="o", label=f"{algo} (n={len(curves)})")
        ax.fill_between(steps, [min(v) for v in vals], [max(v) for v in vals], color=line.get_color(), alpha=0.2)
    ax.set(xlabel="RL step", ylabel="greedy solve rate on the eval set (%)", title=title, ylim=(-2, 102))
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    os.replace(tmp, path)


README_START, README_END = "<!-- algo-table:start -->", "<!-- algo-table:end -->"


def publish(out: Path, table: str, data: dict, preset: str, readme: Path, assets: Path) -> None:
    """Write the table into ``readme`` between the markers and copy the curves and the aggregate into ``assets``."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme} has no {README_START} ... {README_END} block")
    picture = Path(os.path.relpath(assets / f"algo_table_{preset}.png", readme.parent)).as_posix()
    body = table.split("\n", 2)[2].strip("\n")  # without the page title
    block = f"{body}\n\n![eval solve rate per RL step, mean and min-max over seeds]({picture})\n"
    write_atomic(readme, (text[: start + len(README_START)] + "\n" + block + text[end:]).encode())
    write_atomic(assets / f"algo_table_{preset}.png", (out / "curves.png").read_bytes())
    keep = {k: data[k] for k in ("preset", "command", "date", "threshold", "overrides", "algo_overrides", "rows")}
    write_atomic(assets / f"algo_table_{preset}.json", json.dumps(keep, indent=1).encode())


def sft_checkpoint(path: Path) -> Path:
    """The model (or adapter) dir of an SFT run dir or an earlier table's OUT; else ``path`` itself."""
    for sub in ("sft/model", "sft/adapter", "sft/sft/model", "sft/sft/adapter"):
        if (path / sub).is_dir():
            return path / sub
    return path


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run SFT and every algorithm x seed, write and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--preset",
        default="cpu-tiny",
        help="mazegym preset (default cpu-tiny, the text row)",
    )
    p.add_argument("--algos", nargs="+", default=ALGOS, help=f"algorithms (default: {' '.join(ALGOS)})")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="loop.seed values (default 0 1 2)")
    p.add_argument("--steps", type=int, default=None, help="RL steps per run (default: the preset's loop.steps)")
    p.add_argument("--out", type=Path, default=Path("runs/algo-table"), help="output dir (default runs/algo-table)")
    p.add_argument(
        "--sft",
        type=Path,
        default=None,
        help="reuse this SFT model dir, a run dir holding sft/model, or an earlier --out",
    )
    p.add_argument("--extra", nargs="*", default=[], metavar="KEY=VALUE", help="overrides for SFT and every run")
    p.add_argument("--threshold", type=float, default=0.95, help="solve rate for the steps/wall-to columns")
    p.add_argument("--parallel", type=int, default=1, help="runs at a time (default 1: sequential)")
    p.add_argument("--smoke", action="store_true", help=f"tiny budget: {' '.join(SMOKE)}, {SMOKE_STEPS} RL steps")
    p.add_argument(
        "--publish", action="store_true", help="write the table into benchmarks/README.md and docs/assets (see above)"
    )
    p.add_argument("--readme", type=Path, default=ROOT / "benchmarks" / "README.md", help="the page --publish edits")
    args = p.parse_args(argv)
    out = args.out.resolve()
    steps = args.steps if args.steps is not None else (SMOKE_STEPS if args.smoke else None)
    overrides = [
        *(SMOKE if args.smoke else []),
        *([f"loop.steps={steps}"] if steps else []),
        *args.extra,
        "logging.progress=false",
    ]
    if args.sft is None:
        print(f"[sft] mazegym sft --preset {args.preset} -> {out / 'sft'}", flush=True)
        res = run_child(
            ["sft", "--preset", args.preset, "--run-dir", str(out / "sft"), "--no-eval", *overrides],
            out / "sft" / "sft.log",
        )
        if res["rc"] != 0:
            sys.exit(f"SFT failed (exit {res['rc']}); see {out / 'sft' / 'sft.log'}")
    sft = sft_checkpoint((args.sft or out / "sft").resolve())
    if not ((sft / "config.json").is_file() or (sft / "adapter_config.json").is_file()):
        sys.exit(f"--sft {args.sft}: no model or adapter at {sft} (give a model dir or a run dir holding sft/model)")

    def one(job: tuple[str, int]) -> dict:
        algo, seed = job
        run_dir = out / algo / f"seed{seed}"
        done = run_dir / "bench.json"
        cli = [
            "train",
            "--preset",
            args.preset,
            "--run-dir",
            str(run_dir),
            "--resume",
            "none",
            f"sft.checkpoint={sft}",
            f"algo.name={algo}",
            f"loop.seed={seed}",
            *algo_overrides(args.preset, algo),
            *overrides,
        ]
        old = json.loads(done.read_text()) if done.is_file() else {}
        if old.get("rc") == 0 and old["cmd"][3:] == cli:
            print(f"[{algo} seed {seed}] reused {run_dir}", flush=True)
            return read_run(run_dir, old)
        shutil.rmtree(run_dir, ignore_errors=True)  # a crashed, interrupted or other run is measured from scratch
        bench = {"algo": algo, "seed": seed, **run_child(cli, run_dir / "train.log")}
        write_atomic(done, json.dumps(bench, indent=2).encode())
        print(
            f"[{algo} seed {seed}] exit {bench['rc']}, {bench['wall_s']:.0f} s, peak RSS {bench['peak_rss_mb']:.0f} MB",
            flush=True,
        )
        return read_run(run_dir, bench)

    jobs = [(a, s) for a in args.algos for s in args.seeds]
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        runs = list(pool.map(one, jobs))
    rows = aggregate(runs, args.threshold)
    meta = {
        "preset": args.preset,
        "sft": str(sft),
        "overrides": overrides,
        "threshold": args.threshold,
        "command": " ".join(["python benchmarks/algo_table.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "algo_overrides": {a: algo_overrides(args.preset, a) for a in args.algos},
    }
    table = markdown(rows, meta)
    write_atomic(out / "table.md", table.encode())
    write_atomic(out / "table.json", json.dumps({**meta, "rows": rows, "runs": runs}, indent=2).encode())
    plot(runs, out / "curves.png", f"{args.preset}: eval solve rate, mean and min-max over seeds")
    if args.publish:
        publish(out, table, {**meta, "rows": rows}, args.preset, args.readme, ROOT / "docs" / "assets")
    print(table + f"\nWrote {out / 'table.md'}, {out / 'table.json'}, {out / 'curves.png'}")
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

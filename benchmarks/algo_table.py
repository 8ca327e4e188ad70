"""The algorithm table: every algorithm of the zoo on each rollout scheme, from one SFT checkpoint, same budget,
several seeds.

Makes one SFT model (``mazegym sft``, or reuses ``--sft``), then runs ``mazegym train`` once per
scheme x algorithm x seed as a subprocess (a crash is recorded, not fatal), each with ``rollout.branching`` set for
its scheme (``episodes``: whole plays from each maze's start, the case study's; ``branching``: one-move branches from
every open cell), so the preset's ``scheme_settings`` apply to the scheme it does not use itself. An algorithm that
cannot train on a scheme (PPO on branches) gets a row that says so. Writes ``OUT/table.md``, ``OUT/table.json`` and
one ``OUT/curves_<scheme>.png`` per scheme (eval solve rate vs RL step, mean and min-max over seeds). A finished run
(``OUT/<scheme>/<algo>/seed<S>/bench.json`` with exit code 0 and the same command) is reused and any other is rerun
from scratch, so an interrupted table resumes where it stopped; so is the SFT model the table made itself.

    python benchmarks/algo_table.py --preset cpu-tiny --seeds 0 1 2 --out runs/algo-table
    python benchmarks/algo_table.py --smoke --algos grpo ppo --seeds 0 --out /tmp/algo-smoke

``--publish`` also writes the results where the docs read them: the tables between
``<!-- algo-table:start -->`` and ``<!-- algo-table:end -->`` in README.md and benchmarks/README.md, the curves as
``docs/assets/algo_table_<preset>_<scheme>.png`` and the aggregate as ``docs/assets/algo_table_<preset>.json``
(``scripts/gen_algorithms_doc.py`` puts each algorithm's measured rows on docs/algorithms.md).
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

from mazegym.stats import format_interval, mean_interval, wilson_interval  # noqa: E402
from runners.config.schemes import SCHEME_NAMES  # noqa: E402

ALGOS = ["grpo", "ppo", "rloo", "dr_grpo", "dapo", "gigpo"]
SCHEMES = ["episodes", "branching"]
SCHEME_TITLES = {**SCHEME_NAMES, "episodes": f"{SCHEME_NAMES['episodes']} (the case study's scheme)"}
THRESHOLDS = (0.9, 0.95)
# Settings an algorithm needs beyond the preset's. PPO's critic must see every episode, so a preset's zero-variance
# filter (a GRPO setting) is turned off; DAPO's dynamic sampling *is* that filter, and its clip-higher (0.2/0.28) and
# token-mean loss are DAPOConfig's defaults; GiGPO needs nothing extra.
ALGO_OVERRIDES = {"ppo": ["algo.filter_zero_variance=false"], "dapo": ["algo.filter_zero_variance=true"]}
# The table measures the eval set; the preset's held-out sizes would cost minutes per run.
TABLE_OVERRIDES = ["maze.heldout_sets=[]"]


def algo_overrides(algo: str) -> list[str]:
    """The settings ``algo`` needs beyond the preset's (applied before the table's own overrides)."""
    return list(ALGO_OVERRIDES.get(algo, []))


def supports(algo: str, scheme: str) -> bool:
    """Whether ``algo`` trains on rollout scheme ``scheme`` (``algos.rollout_schemes``)."""
    import algos

    return scheme in algos.rollout_schemes(algo)


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
    """One run's measured record: bench.json fields + before/after solve rates + the eval curve (step, rate, s) + the
    critic's explained variance per RL step (PPO) + RL steps/s."""
    rec = {k: bench[k] for k in ("algo", "seed", "rc", "wall_s", "peak_rss_mb")}
    rec["scheme"] = bench.get("scheme", "episodes")
    rec.update(before=None, after=None, solved_before=None, solved_after=None, episodes=None, curve=[])
    rec.update(explained_variance=[], steps_per_s=None)
    results, metrics = run_dir / "eval_results.json", run_dir / "metrics.jsonl"
    if results.is_file():
        res = json.loads(results.read_text())
        for when, key in (("before", "before_rl"), ("after", "after_rl")):
            if res.get(key):
                rec[when], rec[f"solved_{when}"] = res[key]["solve_rate"], res[key]["solved"]
                rec["episodes"] = res[key]["episodes"]
        rec["steps_per_s"] = (res.get("timing") or {}).get("rl_steps_per_s")
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            m = json.loads(line)
            if "eval/solve_rate" in m and m["phase"] in ("eval", "rl"):
                rec["curve"].append([m["step"], m["eval/solve_rate"], m["time"] - bench["start"]])
            if m.get("phase") == "rl" and "train/explained_variance" in m:
                rec["explained_variance"].append([m["step"], m["train/explained_variance"]])
    return rec


EV_LAST_STEPS = 5
"""A run's critic is judged on its explained variance averaged over its last this many RL steps (one step's batch is
noisy)."""


def final_explained_variance(run: dict) -> float | None:
    """The mean explained variance of the run's last :data:`EV_LAST_STEPS` RL steps; None without a critic."""
    values = [v for _, v in run.get("explained_variance", [])[-EV_LAST_STEPS:]]
    return statistics.fmean(values) if values else None


def spread(values: list[float], low: float = float("-inf"), high: float = float("inf")) -> dict | None:
    """Mean, min, max, sample std (None for one value) and the mean's 95% t-interval ``ci95``, clipped to
    ``[low, high]`` (None for one value), of ``values``; None when empty."""
    if not values:
        return None
    ci = mean_interval(values, low, high)
    return {
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
        "std": statistics.stdev(values) if len(values) > 1 else None,
        "n": len(values),
        "ci95": None if ci is None else list(ci),
    }


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


def aggregate(runs: list[dict], thresholds: tuple[float, ...] = THRESHOLDS) -> list[dict]:
    """One row per (scheme, algorithm), in first-seen order: spreads over its finished seeds, failed seeds, and per
    threshold how many seeds reached it and the steps and seconds they took."""
    rows = []
    for scheme, algo in dict.fromkeys((r.get("scheme", "episodes"), r["algo"]) for r in runs):
        mine = [r for r in runs if (r.get("scheme", "episodes"), r["algo"]) == (scheme, algo)]
        if all(r.get("unsupported") for r in mine):
            rows.append({"scheme": scheme, "algo": algo, "unsupported": True, "seeds": [r["seed"] for r in mine]})
            continue
        ok = [r for r in mine if r["rc"] == 0 and r["after"] is not None]
        reach = {}
        for threshold in thresholds:
            hits = [h for h in (to_threshold(r["curve"], threshold) for r in ok) if h is not None]
            reach[f"{threshold:g}"] = {
                "reached": len(hits),
                "steps": spread([h[0] for h in hits]),
                "seconds": spread([h[1] for h in hits]),
            }
        evs = [ev for ev in (final_explained_variance(r) for r in ok) if ev is not None]
        evs_all = [statistics.fmean(v for _, v in r["explained_variance"]) for r in ok if r.get("explained_variance")]
        rows.append(
            {
                "scheme": scheme,
                "algo": algo,
                "seeds": [r["seed"] for r in mine],
                "finished": len(ok),
                "failed": [r["seed"] for r in mine if r not in ok],
                "before": spread([r["before"] for r in ok if r["before"] is not None], 0.0, 1.0),
                "after": spread([r["after"] for r in ok], 0.0, 1.0),
                "before_counts": counts(ok, "before"),
                "after_counts": counts(ok, "after"),
                "to_threshold": reach,
                "steps_run": spread([r["curve"][-1][0] for r in ok if r["curve"]]),
                "explained_variance": spread(evs),
                "explained_variance_all_steps": spread(evs_all),
                "steps_per_s": spread([r["steps_per_s"] for r in ok if r.get("steps_per_s")]),
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


def fmt_rate(s: dict | None) -> str:
    """A solve rate's mean over seeds in percent with its 95% t-interval: ``75.0% [12.9-100.0%]``."""
    if s is None:
        return "-"
    if s.get("ci95") is None:
        return f"{100 * s['mean']:.1f}%"
    lo, hi = s["ci95"]
    return f"{100 * s['mean']:.1f}% [{100 * lo:.1f}-{100 * hi:.1f}%]"


def fmt_steps(r: dict, key: str) -> str:
    """RL steps to threshold ``key``: the mean over the seeds that reached it, and how many of the finished did."""
    hit = r["to_threshold"].get(key)
    if not hit or not hit["reached"]:
        return "not reached"
    return f"{fmt(hit['steps'], 1, 1)} ({hit['reached']}/{r['finished']})"


def fmt_ev(r: dict) -> str:
    """The critic's explained variance: mean over seeds of the last steps' mean, then of every step's; ``-`` for the
    critic-free algorithms."""
    last, every = r.get("explained_variance"), r.get("explained_variance_all_steps")
    if last is None:
        return "-"
    return f"{last['mean']:.2f} / {every['mean']:.2f}" if every else f"{last['mean']:.2f}"


def markdown(rows: list[dict], meta: dict) -> str:
    """The tables (one per rollout scheme) as Markdown, with the command and settings that produced them."""
    keys = [f"{t:g}" for t in meta["thresholds"]]
    lines = [
        f"# Algorithm table: preset `{meta['preset']}`",
        "",
        f"Command: `{meta['command']}`  ",
        f"SFT start: `{meta['sft']}`; overrides: `{' '.join(meta['overrides'])}`  ",
        "Greedy solve rate on the preset's eval set after the run's RL steps. *after RL* is the mean over finished "
        "seeds with its 95% Student-t interval over seeds (3 seeds: mean +- 2.48 sd, so wide); the solved columns "
        "give each seed's count with its 95% Wilson interval on the eval set (61/64 is 87.1-98.4%): one seed's "
        "difference inside it is a maze or two, not a result. *steps to X* is the first evaluated RL step at or "
        "above X, mean over the seeds that reached it (how many of the finished did). *critic EV*: the critic's "
        f"explained variance of its value targets, mean of each seed's last {EV_LAST_STEPS} RL steps / of all its "
        "steps, mean over seeds (once nearly every play succeeds, the targets barely vary and it falls). "
        f"{meta['date']}",
    ]
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        lines += [
            "",
            f"**{SCHEME_TITLES.get(scheme, scheme)}**",
            "",
            "| algo | seeds ok | solved before RL | after RL, mean [95% CI] | solved after RL, per seed | "
            + " | ".join(f"steps to {float(k):.0%}" for k in keys)
            + " | "
            + " | ".join(f"wall to {float(k):.0%}" for k in keys)
            + " | critic EV | RL steps/s | wall per run | peak RSS |",
            "|---|---|---|---|---|" + "---|" * (2 * len(keys)) + "---|---|---|---|",
        ]
        for r in (r for r in rows if r["scheme"] == scheme):
            if r.get("unsupported"):
                lines.append(f"| {r['algo']} | not run: it does not train on {scheme} |" + " |" * (7 + 2 * len(keys)))
                continue
            ok = f"{r['finished']}/{len(r['seeds'])}" + (f" (failed: {r['failed']})" if r["failed"] else "")
            steps = [fmt_steps(r, k) for k in keys]
            walls = []
            for k in keys:
                hit = r["to_threshold"][k]
                walls.append("-" if not hit["reached"] else fmt(hit["seconds"], 1 / 60, 1, " min"))
            lines.append(
                f"| {r['algo']} | {ok} | {fmt_counts(r['before_counts'], True)} | {fmt_rate(r['after'])} | "
                f"{fmt_counts(r['after_counts'])} | {' | '.join(steps)} | {' | '.join(walls)} | "
                f"{fmt_ev(r)} | {fmt(r['steps_per_s'], 1, 3)} | "
                f"{fmt(r['wall_s'], 1 / 60, 1, ' min')} | {fmt(r['peak_rss_mb'], 1 / 1024, 2, ' GB')} |"
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
    """Write the tables into ``readme`` between the markers and copy each scheme's curves and the aggregate into
    ``assets``."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme} has no {README_START} ... {README_END} block")
    body = table.split("\n", 2)[2].strip("\n")  # without the page title
    pictures = []
    for scheme in data["schemes"]:
        name = f"algo_table_{preset}_{scheme}.png"
        if not (out / f"curves_{scheme}.png").is_file():
            continue
        write_atomic(assets / name, (out / f"curves_{scheme}.png").read_bytes())
        link = Path(os.path.relpath(assets / name, readme.parent)).as_posix()
        pictures.append(
            f"![{SCHEME_TITLES.get(scheme, scheme)}: eval solve rate per RL step, mean and min-max over seeds]({link})"
        )
    block = f"{body}\n\n" + "\n".join(pictures) + "\n"
    write_atomic(readme, (text[: start + len(README_START)] + "\n" + block + text[end:]).encode())
    keep = {k: data[k] for k in ("preset", "command", "sft", "date", "thresholds", "overrides", "schemes", "rows")}
    write_atomic(assets / f"algo_table_{preset}.json", json.dumps(keep, indent=1).encode())


def sft_checkpoint(path: Path) -> Path:
    """The model (or adapter) dir of an SFT run dir or an earlier table's OUT; else ``path`` itself."""
    for sub in ("sft/model", "sft/adapter", "sft/sft/model", "sft/sft/adapter"):
        if (path / sub).is_dir():
            return path / sub
    return path


def shown_path(path: Path) -> str:
    """``path`` as the table names it: relative to the working directory when it lies under it (a published table
    must not name one machine's directories)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run SFT and every scheme x algorithm x seed, write and print the tables."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--preset",
        default="cpu-tiny",
        help="mazegym preset (default cpu-tiny, the text row)",
    )
    p.add_argument("--algos", nargs="+", default=ALGOS, help=f"algorithms (default: {' '.join(ALGOS)})")
    p.add_argument(
        "--schemes", nargs="+", default=SCHEMES, choices=SCHEMES, help=f"rollout schemes (default: {' '.join(SCHEMES)})"
    )
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
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="runs at a time (default 1: sequential); above 1 each run's update and rollouts use one thread",
    )
    p.add_argument("--smoke", action="store_true", help=f"tiny budget: {' '.join(SMOKE)}, {SMOKE_STEPS} RL steps")
    p.add_argument(
        "--publish", action="store_true", help="write the tables into benchmarks/README.md and docs/assets (see above)"
    )
    p.add_argument(
        "--readme",
        type=Path,
        nargs="+",
        default=[ROOT / "README.md", ROOT / "benchmarks" / "README.md"],
        help="the pages --publish edits (default: README.md and benchmarks/README.md)",
    )
    args = p.parse_args(argv)
    out = args.out.resolve()
    steps = args.steps if args.steps is not None else (SMOKE_STEPS if args.smoke else None)
    overrides = [
        *TABLE_OVERRIDES,
        *(SMOKE if args.smoke else []),
        *([f"loop.steps={steps}"] if steps else []),
        *(["loop.update_threads=1", "loop.rollout_threads=1"] if args.parallel > 1 else []),
        *args.extra,
        "logging.progress=false",
    ]
    if args.sft is None:
        sft_cli = ["sft", "--preset", args.preset, "--run-dir", str(out / "sft"), "--no-eval", *overrides]
        made = out / "sft" / "bench.json"
        old = json.loads(made.read_text()) if made.is_file() else {}
        if old.get("rc") == 0 and old["cmd"][3:] == sft_cli:
            print(f"[sft] reused {out / 'sft'}", flush=True)
        else:
            print(f"[sft] mazegym sft --preset {args.preset} -> {out / 'sft'}", flush=True)
            shutil.rmtree(out / "sft", ignore_errors=True)
            res = run_child(sft_cli, out / "sft" / "sft.log")
            if res["rc"] != 0:
                sys.exit(f"SFT failed (exit {res['rc']}); see {out / 'sft' / 'sft.log'}")
            write_atomic(made, json.dumps(res, indent=2).encode())
    sft = sft_checkpoint((args.sft or out / "sft").resolve())
    if not ((sft / "config.json").is_file() or (sft / "adapter_config.json").is_file()):
        sys.exit(f"--sft {args.sft}: no model or adapter at {sft} (give a model dir or a run dir holding sft/model)")

    def one(job: tuple[str, str, int]) -> dict:
        scheme, algo, seed = job
        if not supports(algo, scheme):
            return {"scheme": scheme, "algo": algo, "seed": seed, "unsupported": True}
        run_dir = out / scheme / algo / f"seed{seed}"
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
            f"rollout.branching={str(scheme == 'branching').lower()}",
            f"loop.seed={seed}",
            *algo_overrides(algo),
            *overrides,
        ]
        old = json.loads(done.read_text()) if done.is_file() else {}
        if old.get("rc") == 0 and old["cmd"][3:] == cli:
            print(f"[{scheme} {algo} seed {seed}] reused {run_dir}", flush=True)
            return read_run(run_dir, old)
        shutil.rmtree(run_dir, ignore_errors=True)  # a crashed, interrupted or other run is measured from scratch
        bench = {"scheme": scheme, "algo": algo, "seed": seed, **run_child(cli, run_dir / "train.log")}
        write_atomic(done, json.dumps(bench, indent=2).encode())
        print(
            f"[{scheme} {algo} seed {seed}] exit {bench['rc']}, {bench['wall_s']:.0f} s, "
            f"peak RSS {bench['peak_rss_mb']:.0f} MB",
            flush=True,
        )
        return read_run(run_dir, bench)

    jobs = [(scheme, a, s) for scheme in args.schemes for a in args.algos for s in args.seeds]
    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        runs = list(pool.map(one, jobs))
    rows = aggregate(runs)
    meta = {
        "preset": args.preset,
        "sft": shown_path(sft),
        "overrides": overrides,
        "thresholds": list(THRESHOLDS),
        "schemes": list(args.schemes),
        "command": " ".join(["python benchmarks/algo_table.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    table = markdown(rows, meta)
    write_atomic(out / "table.md", table.encode())
    write_atomic(out / "table.json", json.dumps({**meta, "rows": rows, "runs": runs}, indent=2).encode())
    for scheme in args.schemes:
        mine = [r for r in runs if r["scheme"] == scheme and not r.get("unsupported")]
        if mine:
            title = f"{args.preset}, {SCHEME_NAMES[scheme]}: mean and min-max over seeds"
            plot(mine, out / f"curves_{scheme}.png", title)
    if args.publish:
        for readme in args.readme:
            publish(out, table, {**meta, "rows": rows}, args.preset, readme, ROOT / "docs" / "assets")
    print(table + f"\nWrote {out / 'table.md'}, {out / 'table.json'}, {out / 'curves_<scheme>.png'}")
    return 0 if all(r.get("unsupported") or r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())

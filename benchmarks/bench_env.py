"""Environment benchmarks: steps/s, reset ms by size x generator, render ms.

As a script (prints figures with units, writes JSON with the machine's facts)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_env.py [--seconds S] [--json PATH]

As a pytest-benchmark suite (the project's pytest config disables benchmarks by default)::

    OMP_NUM_THREADS=1 .venv/bin/pytest benchmarks/bench_env.py --benchmark-enable -q \
        --benchmark-columns=min,median,mean,ops --benchmark-sort=name

Each step case times a block of 1,000 ``env.step`` calls through ``gym.make`` (wrappers
included) with a fixed action list that walks into walls and along corridors; the episode is
reset outside the timed block whenever it ends, so the figures are pure step cost. Steps/s =
1000 / seconds per block (pytest-benchmark's "OPS" column is blocks/s, not steps/s).
``autoreset`` includes the resets of 20-move episodes instead. Both modes build their cases
with the same functions below; the script times them with ``time_blocks``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import mazegym
from mazegym.render import render_frame

BLOCK = 1000
CALLS_PER_BLOCK = 100  # resets / renders per timed block in script mode: one call is too short to time alone
TARGET_STEPS_PER_S = 100_000
TARGET_RESET_MS = 0.1
OBS_MODES = ("image", "text", "both")
DEFAULT_JSON = Path("runs/bench/bench_env.json")


def step_block(obs_mode: str = "image", autoreset: bool = False):
    """A closure running BLOCK steps of VisMaze-v0 (9x9, 225 px).

    Without ``autoreset`` the episode never times out, so resets stay (almost) out of the block;
    with it, the env keeps its default 20-move limit and the resets are part of the cost.
    """
    env = (
        gym.make("VisMaze-v0", obs_mode=obs_mode)
        if autoreset
        else gym.make("VisMaze-v0", obs_mode=obs_mode, max_moves=10**9)
    )
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 4, BLOCK).tolist()
    step, reset = env.step, env.reset

    def run():
        for a in actions:
            _, _, terminated, truncated, _ = step(a)
            if terminated or truncated:
                reset()

    return run


def reset_block(size: int, generator: str, calls: int = 1):
    """A closure calling ``env.reset()`` ``calls`` times: generation + BFS + first frame + first observation."""
    env = gym.make("VisMaze-v0", size=size, generator=generator)
    env.reset(seed=0)
    reset = env.reset

    def run():
        for _ in range(calls):
            reset()

    return run


def render_block(size: int, calls: int = 1):
    """A closure calling ``render()`` in rgb_array mode (a copy of the maintained frame) ``calls`` times."""
    env = gym.make("VisMaze-v0", size=size, render_mode="rgb_array")
    env.reset(seed=0)
    render = env.render

    def run():
        for _ in range(calls):
            render()

    return run


def time_blocks(run, seconds: float, min_blocks: int = 3, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of each call of ``run``, repeated until ``seconds`` have passed (at least ``min_blocks``)."""
    for _ in range(warmup):
        run()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < min_blocks or time.perf_counter() < deadline:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def machine_facts() -> dict:
    """What a reader needs to judge the figures: CPUs, versions, thread settings."""
    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "gymnasium": gym.__version__,
        "platform": platform.platform(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }


def _rates(times: list[float], units: int) -> dict:
    return {"best": units / min(times), "median": units / statistics.median(times), "blocks": len(times)}


def _ms(times: list[float], calls: int) -> dict:
    return {"best": min(times) / calls * 1e3, "median": statistics.median(times) / calls * 1e3, "blocks": len(times)}


def run_all(seconds: float = 1.0) -> dict:
    """Time every script case for about ``seconds`` each; returns the figures and the machine facts."""
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds_per_case": seconds,
        "machine": machine_facts(),
        "loadavg_start": list(os.getloadavg()),
        "steps_per_s": {},
        "reset_ms": {},
        "render_ms": {},
    }
    for mode in OBS_MODES:
        result["steps_per_s"][mode] = _rates(time_blocks(step_block(mode), seconds), BLOCK)
    result["steps_per_s"]["autoreset"] = _rates(time_blocks(step_block("image", autoreset=True), seconds), BLOCK)
    for size, generator in [(9, g) for g in sorted(mazegym.GENERATORS)] + [(21, "wilson")]:
        times = time_blocks(reset_block(size, generator, CALLS_PER_BLOCK), seconds)
        result["reset_ms"][f"{size}x{size} {generator}"] = _ms(times, CALLS_PER_BLOCK)
    for size in (9, 21):
        result["render_ms"][f"{size}x{size}"] = _ms(
            time_blocks(render_block(size, CALLS_PER_BLOCK), seconds), CALLS_PER_BLOCK
        )
    steps = result["steps_per_s"]
    result["image_over_text"] = {k: steps["image"][k] / steps["text"][k] for k in ("best", "median")}
    result["loadavg_end"] = list(os.getloadavg())
    return result


def write_json(data: dict, path: Path) -> None:
    """Write ``data`` atomically: a reader never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def format_report(r: dict) -> str:
    """The figures as lines of text, each with its unit."""
    m = r["machine"]
    lines = [
        f"{r['date']}  {m['cpu_count']} CPUs  python {m['python']}  numpy {m['numpy']}  "
        f"load average {r['loadavg_start'][0]:.2f} at start, {r['loadavg_end'][0]:.2f} at end "
        f"({r['seconds_per_case']:g} s per case)"
    ]
    for case, v in r["steps_per_s"].items():
        lines.append(
            f"steps/s  {case:10s} best block {v['best']:>10,.0f}   median {v['median']:>10,.0f}   "
            f"({v['blocks']} blocks of {BLOCK} steps)"
        )
    ratio = r["image_over_text"]
    lines.append(f"ratio image/text steps/s: best {ratio['best']:.2f}, median {ratio['median']:.2f}")
    for kind in ("reset_ms", "render_ms"):
        for case, v in r[kind].items():
            lines.append(
                f"{kind[:-3]:6s} {case:12s} best {v['best']:.4f} ms   median {v['median']:.4f} ms   "
                f"({v['blocks']} blocks of {CALLS_PER_BLOCK} calls)"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Run the script cases, print them and write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=1.0, help="timing budget per case (default 1.0)")
    p.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"where to write the figures (default {DEFAULT_JSON})"
    )
    args = p.parse_args(argv)
    result = run_all(args.seconds)
    print(format_report(result))
    write_json(result, args.json)
    print(f"wrote {args.json}")
    return result


# pytest-benchmark cases: the same closures, timed by pytest-benchmark.


@pytest.mark.parametrize("obs_mode", OBS_MODES)
def test_steps_per_second(benchmark, obs_mode):
    benchmark.extra_info["steps_per_round"] = BLOCK
    benchmark.pedantic(step_block(obs_mode), rounds=30, warmup_rounds=2)
    benchmark.extra_info["steps_per_second"] = BLOCK / benchmark.stats.stats.median


def test_step_with_autoreset(benchmark):
    """VisMaze-v0 as an agent sees it: 20-move episodes, reset cost included."""
    benchmark.pedantic(step_block("image", autoreset=True), rounds=20, warmup_rounds=1)
    benchmark.extra_info["steps_per_second"] = BLOCK / benchmark.stats.stats.median


@pytest.mark.parametrize("generator", sorted(mazegym.GENERATORS))
@pytest.mark.parametrize("size", [9, 11, 15, 21])
def test_reset_ms(benchmark, size, generator):
    """Maze generation + BFS + first frame + first observation, through gym.make."""
    benchmark(reset_block(size, generator))
    benchmark.extra_info["reset_ms"] = benchmark.stats.stats.median * 1e3


@pytest.mark.parametrize("size", [9, 11, 21])
def test_render_ms(benchmark, size):
    """render() in rgb_array mode (a copy of the maintained frame)."""
    benchmark(render_block(size))


@pytest.mark.parametrize("size", [9, 21])
def test_render_frame_from_scratch_ms(benchmark, size):
    """The standalone frame function (background + agent), as replay/recording use it."""
    env = gym.make("VisMaze-v0", size=size)
    _, info = env.reset(seed=0)
    spec = env.unwrapped.spec_maze
    benchmark(render_frame, spec.grid, info["agent"], info["goal"])


if __name__ == "__main__":
    main(sys.argv[1:])

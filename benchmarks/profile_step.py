"""Profile one RL step of a preset (default: the main job's) from an SFT start: where the seconds go.

    python benchmarks/profile_step.py --sft RUN/sft/model            # RUN: a finished `mazegym train` run dir
    python benchmarks/profile_step.py --sft RUN/sft/model --steps 4 --out profile.md

Prints (and with ``--out`` writes) a markdown table: the seconds of each part of a step, measured
under ``cProfile`` on steps 2.. (step 1 warms up) and scaled to the step's unprofiled wall time, then
the wall time of a whole step run three ways on the same weights: one thread, one phase after the
other; collection of the next step beside the update (``loop.overlap_generation``); and that plus
``runner.update_threads`` copies of the policy. Runs single-threaded torch (``OMP_NUM_THREADS=1``)
as the main job does; a second program on the other core shows what a busy machine does to each.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PARTS = {
    "generate": [
        ("cell prompts (env reset, render, chat encoding)", "cell_prompts"),
        ("image preprocessing (frames -> patches)", "pixel_inputs"),
        ("branch scoring: vision encoder", "encode_images"),
        ("branch scoring: whole model forward", "score_replies"),
        ("continuation walks (numpy)", "continuation_values"),
    ],
    "update": [
        ("old log-prob pass (no grad)", "score_batch"),
        ("image preprocessing", "prepare_multimodal"),
        ("policy forward passes (old log-prob pass and every epoch)", "score_turns"),
        ("backward passes", "run_backward"),
        ("optimizer steps (AdamW)", "adamw"),
    ],
}
"""Rows of the table: (label, text in the name of the function whose cumulative time is the row) per phase."""


class _Collector:
    """The one executor method :class:`runners.train.loop.CollectAhead` calls."""

    def __init__(self, generator, config):
        self.generator, self.config = generator, config

    def generate(self, mazes, step):
        from runners.train.steps import play_step_mazes

        return play_step_mazes(self.generator, mazes, self.config, step)


def _cumulative(profile: cProfile.Profile, part: str) -> float:
    """Cumulative seconds of the function whose name holds ``part`` (the largest such entry)."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    return max((cum for (_, _, name), (_, _, _, cum, _) in stats.items() if part in name), default=0.0)


def intra_op_speedup(policy) -> dict[int, float]:
    """Best-of-5 seconds of the vision encoder's forward+backward on 128 random 9x9 cell grids, at 1 and 2 torch
    threads (the thread count is restored)."""
    import torch

    from algos.models.maze_vlm import RecurrentConvEncoder

    # A copy with every weight trainable: the policy's own encoder (and its gradients) stay untouched.
    encoder = copy.deepcopy(next(m for m in policy.model.modules() if isinstance(m, RecurrentConvEncoder)))
    encoder.requires_grad_(True)
    grid = torch.randn(128, 9, 9, encoder.patch_embed.in_features, generator=torch.Generator().manual_seed(0))
    before, out = torch.get_num_threads(), {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            times = []
            for _ in range(6):
                t0 = time.perf_counter()
                encoder(grid)[0].sum().backward()
                times.append(time.perf_counter() - t0)
            out[threads] = min(times[1:])
    finally:
        torch.set_num_threads(before)
    return out


def main(argv: list[str] | None = None) -> int:
    """Build the preset's objects once, profile its phases, then time whole steps three ways."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sft", type=Path, required=True, help="an SFT model dir (RUN/sft/model)")
    parser.add_argument("--preset", default="cpu-maze-vlm")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps (the first one only warms up)")
    parser.add_argument("--threads", type=int, default=2, help="runner.update_threads of the third way")
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this markdown file")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from algos.parallel import ThreadReplicas
    from runners import build
    from runners.config import apply_overrides
    from runners.config.presets import get_preset
    from runners.train import steps
    from runners.train.loop import CollectAhead
    from runners.train.sync import AdapterSync

    torch.set_num_threads(1)
    run_dir = Path(tempfile.mkdtemp(prefix="mazegym-profile-step-"))
    # One rollout thread: cProfile sees only the thread it runs in, so the collection's parts are profiled there.
    cfg = apply_overrides(
        get_preset(args.preset), [f"run_dir={run_dir}", "runner.update_threads=1", "engine.rollout_threads=1"]
    )
    model_dir, adapter = build.start_from(args.sft, build.base_model_dir(cfg))
    generator, policy, algorithm, _ = build.build_training(cfg, model_dir, adapter)
    stream = build.build_stream(cfg)
    sync = AdapterSync(run_dir / "adapter_sync", keep=2)

    rows: dict[str, dict[str, float]] = {"generate": {}, "update": {}}
    walls: dict[str, list[float]] = {"generate": [], "update": [], "sync": [], "eval": []}
    for step in range(1, args.steps + 1):
        for phase, call in (
            ("generate", lambda: steps.generate_step(generator, stream, cfg, step)),
            ("update", lambda: steps.update_step(algorithm, episodes)),
        ):
            t0 = time.perf_counter()
            profile = cProfile.Profile()
            profile.enable()
            result = call()
            profile.disable()
            profiled = time.perf_counter() - t0
            if phase == "generate":
                episodes = result
            if step > 1:
                for label, name in PARTS[phase]:
                    rows[phase][label] = rows[phase].get(label, 0.0) + _cumulative(profile, name) / profiled
        t0 = time.perf_counter()
        steps.sync_step(policy, generator, sync, step)
        walls["sync"].append(time.perf_counter() - t0)
    # Unprofiled wall times of the phases, one after the other.
    for step in range(args.steps + 1, args.steps + 3):
        t0 = time.perf_counter()
        episodes = steps.generate_step(generator, stream, cfg, step)
        walls["generate"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        steps.update_step(algorithm, episodes)
        walls["update"].append(time.perf_counter() - t0)
        steps.sync_step(policy, generator, sync, step)
    t0 = time.perf_counter()
    steps.eval_step(generator, cfg)
    walls["eval"].append(time.perf_counter() - t0)
    mean = {k: sum(v) / len(v) for k, v in walls.items() if v}
    serial = mean["generate"] + mean["update"] + mean["sync"]

    def overlapped(step: int) -> float:
        mazes = [next(stream) for _ in range(cfg.loop.mazes_per_step)]
        episodes = steps.generate_step(generator, stream, cfg, step)
        t0 = time.perf_counter()
        ahead = CollectAhead(_Collector(generator, cfg), mazes, step + 1, concurrent=True)
        steps.update_step(algorithm, episodes)
        ahead.wait()
        steps.sync_step(policy, generator, sync, step)
        return time.perf_counter() - t0

    intra = intra_op_speedup(policy)
    base = args.steps + 3
    with_overlap = sum(overlapped(base + 2 * i) for i in range(2)) / 2
    algorithm.strategy = ThreadReplicas(policy, args.threads)
    with_threads = sum(overlapped(base + 4 + 2 * i) for i in range(2)) / 2

    lines = [
        f"One RL step of `{args.preset}` from `{args.sft}` ({os.cpu_count()} CPUs, 1-minute load average "
        f"{os.getloadavg()[0]:.2f} at the end); parts measured under cProfile on steps 2-{args.steps} and scaled to "
        "each phase's unprofiled wall time; a part's time includes the parts it calls.",
        "",
        "| phase | part | seconds per step |",
        "|---|---|---|",
    ]
    for phase in ("generate", "update"):
        lines.append(f"| **{phase}** | whole phase | **{mean[phase]:.2f}** |")
        for label, share in rows[phase].items():
            lines.append(f"| {phase} | {label} | {share / max(args.steps - 1, 1) * mean[phase]:.2f} |")
    lines += [
        f"| **sync** | publish + load the adapter | **{mean['sync']:.2f}** |",
        f"| **eval** | 64 mazes, greedy (every `eval.every` steps) | **{mean['eval']:.2f}** |",
        "",
        "| how a step runs | wall seconds per step (generate + update + sync) |",
        "|---|---|",
        f"| one after the other, one thread | {serial:.2f} |",
        f"| next step's collection beside the update (`loop.overlap_generation=true`) | {with_overlap:.2f} |",
        f"| that, plus `runner.update_threads={args.threads}` | {with_threads:.2f} |",
        "",
        "For contrast, torch's own intra-op threads on the vision encoder's forward+backward of 128 cell images: "
        f"{intra[1] * 1000:.0f} ms with one thread, {intra[2] * 1000:.0f} ms with `torch.set_num_threads(2)` "
        f"({intra[1] / intra[2]:.2f}x).",
    ]
    shutil.rmtree(run_dir, ignore_errors=True)
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

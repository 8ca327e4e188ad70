"""GPU check of the training entry points: the default main job through the CLI, and the Qwen3-VL recipe in miniature.

    PYTHONUNBUFFERED=1 python3 scripts/gpu_train_check.py [--out DIR] [--device auto|cuda|cpu] [--only NAME ...]

Every step runs in a child process with its own time limit and is reported PASS, FAIL (with the
reason and the output's last lines) or SKIP (with the reason); a failure never stops the next
step. Results go to ``--out`` (default ``$OUT``) as ``gpu_train_check.json``, rewritten after
every step so a killed run leaves what it did, plus ``report.html`` from step 3. Exit code 0
unless ``--strict`` and a step failed. ``--device cpu`` runs the same command lines on the CPU
(the rehearsal that checks them); ``auto`` (the default) picks cuda when torch sees a GPU.

Steps
1. ``cli-train``: ``mazegym train`` (``python -m runners.cli train``) with the ``cpu-tiny`` preset
   (a tiny Qwen2 text LM on 7x7 ASCII mazes) and ``model.device=DEVICE`` at a tiny
   budget (:data:`TRAIN_BUDGET`: SFT 40 x 64 moves, 2 GRPO steps of 8 mazes x 8 rollouts with
   zero-variance filtering off and a 0.01 entropy bonus, so every update runs with a non-zero
   gradient even when every rollout fails, the parity probe after every sync, greedy evaluation
   on the fixed 64 mazes before and after RL). The
   child records each phase (SFT, generator and policy construction, RL loop, each evaluation):
   wall seconds, peak allocated GPU memory, and the device and dtypes of the models it built.
2. ``cli-eval``: ``mazegym eval --run-dir RUN`` (the latest checkpoint, on the run's device).
3. ``cli-report``: ``mazegym report RUN``; the HTML is copied to the output folder.
4. ``qwen3-vl-rl``: the ``qwen3-vl-8b-lora32`` preset with ``model.path`` = a tiny random Qwen3-VL
   (:func:`runners.models.tiny.build_tiny_qwen3_vl`, nothing downloaded), in the preset's bf16, on the
   local runner with the hf backend (no vLLM, no Ray): generator, LoRA policy and GRPO built as
   the runners build them (:data:`QWEN3_OVERRIDES`), 2 mazes x 4 rollouts on images with the full
   history, one update, adapter sync + parity probe, greedy play of 4 evaluation mazes.
5. ``cli-train-maze-vlm``: ``mazegym train --preset cpu-maze-vlm`` (MazeVLM: recurrent-conv vision
   encoder, projector, one-layer Qwen2 decoder) with the same device and a tiny budget
   (:data:`MAZE_VLM_BUDGET`): vision pretraining, SFT, 2 GiGPO steps, evaluation on VisMaze-v0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

TRAIN_BUDGET = [
    "sft.steps=40",
    "sft.batch_size=64",
    "loop.steps=2",
    "loop.mazes_per_step=8",
    "rollout.group_size=8",
    "algo.filter_zero_variance=false",
    "algo.entropy_coef=0.01",
    "loop.parity_every=1",
    "eval.every=0",
    "checkpoint.every=0",
    "logging.progress=false",
]
"""Overrides that shrink the default preset to a few SFT steps and 2 RL steps (evaluation stays the fixed 64 mazes).

Zero-variance filtering is off and a small entropy bonus is on, so every update runs and moves the
adapter (a non-zero gradient) even when every rollout of a weak SFT start fails alike."""

MAZE_VLM_BUDGET = [
    "model.vision_pretraining.steps=10",
    "sft.steps=10",
    "sft.batch_size=32",
    "loop.steps=2",
    "loop.mazes_per_step=4",
    "rollout.group_size=4",
    "algo.filter_zero_variance=false",
    "algo.entropy_coef=0.01",
    "maze.heldout_sets=[]",
    "eval.every=0",
    "checkpoint.every=0",
    "loop.max_minutes=0",
    "logging.progress=false",
]
"""The same shrinking for the cpu-maze-vlm preset (no held-out sets: only VisMaze-v0 is evaluated)."""

QWEN3_OVERRIDES = [
    "runner.kind=local",
    "runner.num_workers=1",
    "runner.num_gpus=1",
    "engine.name=hf",
    "loop.steps=1",
    "loop.mazes_per_step=2",
    "rollout.group_size=4",
    "rollout.max_moves=4",
    "rollout.max_new_tokens=16",
    "loop.parity_every=1",
    "algo.entropy_coef=0.01",
]
"""The Qwen3-VL preset shrunk to one local hf step (model.path, model.device and run_dir are added)."""

CHILD_ENV = {
    "TOKENIZERS_PARALLELISM": "false",
    "TQDM_DISABLE": "1",
    "PYTHONUNBUFFERED": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}
"""Environment of every child: no progress bars (the logs stay readable), unbuffered output."""

RESULTS: list[dict[str, Any]] = []


# ----------------------------------------------------------------------------- bookkeeping
def save(out: Path | None) -> None:
    """Write the results so far to ``out/gpu_train_check.json``."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_train_check.json").write_text(json.dumps(RESULTS, indent=2, default=str))


def headline(info: dict[str, Any]) -> str:
    """One line with a step's key numbers (for the summary tables)."""
    parts = []
    if info.get("sft"):
        parts.append(f"SFT {info['sft'].get('steps')} steps {info['sft'].get('seconds')}s")
    for key in ("before_rl", "after_rl"):
        if info.get(key):
            parts.append(f"{key.replace('_rl', '')} {info[key].get('solved')}/{info[key].get('episodes')}")
    for name, r in (info.get("results") or {}).items():
        parts.append(f"{name} {r.get('solved')}/{r.get('episodes')}")
    rl = info.get("rl_steps") or []
    if rl:
        parts.append(f"{len(rl)} RL steps, grad_norm {[round(s.get('train/grad_norm', 0), 5) for s in rl]}")
        parity = [s["sync/parity_mean_abs"] for s in rl if "sync/parity_mean_abs" in s]
        if parity:
            parts.append(f"parity {max(parity):.1e}")
    if info.get("update"):
        parts.append(f"update grad_norm {info['update'].get('grad_norm')}, {info['update'].get('num_turns')} turns")
    if info.get("sync", {}).get("sync/parity_mean_abs") is not None:
        parts.append(f"parity {info['sync']['sync/parity_mean_abs']:.1e} (tol {info['sync'].get('tolerance')})")
    devices = sorted(
        {d for ph in info.get("phases") or [] for d in ph.get("devices", [])}
        | set((info.get("policy") or {}).get("devices", []))
    )
    if devices:
        parts.append(f"devices {devices}")
    if info.get("gpu_peak_mib") is not None:
        parts.append(f"GPU peak {info['gpu_peak_mib']} MiB")
    if info.get("timings"):
        parts.append("seconds " + ", ".join(f"{k} {v}" for k, v in info["timings"].items()))
    if info.get("report_bytes"):
        parts.append(f"report {info['report_bytes']} bytes")
    return "; ".join(parts)


def record(out: Path | None, name: str, status: str, seconds: float, **info: Any) -> dict[str, Any]:
    """Append one step's result (with its :func:`headline`), print it, save the JSON."""
    entry = {"step": name, "status": status, "seconds": round(seconds, 1), "headline": headline(info), **info}
    RESULTS.append(entry)
    lines = [f"--- {name}: {status} ({seconds:.1f}s)"]
    for key, value in entry.items():
        if key in ("step", "status", "seconds", "output_tail", "traceback"):
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines += [f"  {key}:"] + [f"    {json.dumps(v, default=str)}" for v in value]
        else:
            lines.append(f"  {key}: {json.dumps(value, default=str)}")
    print("\n".join(lines), flush=True)
    if entry.get("traceback"):
        print(entry["traceback"], flush=True)
    if status == "FAIL" and entry.get("output_tail"):
        print("output tail:\n" + entry["output_tail"], flush=True)
    save(out)
    return entry


def run_child(args: list[str], log: Path, timeout: float) -> tuple[int | None, float, str]:
    """Run ``python3 <args>`` from the repo root, output to ``log``; (exit code or None on timeout, seconds, tail)."""
    env = {**os.environ, **CHILD_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # the child and anything it spawned
            proc.wait()
            rc = None
    seconds = time.perf_counter() - t0
    lines = log.read_text(errors="replace").splitlines()
    return rc, seconds, "\n".join(lines[-40:])


def read_json(path: Path) -> Any:
    """The JSON at ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ----------------------------------------------------------------------------- CLI child
def cli_child(stats_path: str, argv: list[str]) -> int:
    """Child process: ``runners.cli.main(argv)`` with phase probes; writes their records to ``stats_path``."""
    t_start = time.perf_counter()
    import torch

    import runners.local as local
    import runners.train.sft as sftmod
    from runners import cli

    cuda = torch.cuda.is_available()
    phases: list[dict[str, Any]] = []
    stack: list[dict[str, Any]] = []

    def describe(obj: Any) -> dict[str, Any]:
        model = obj if isinstance(obj, torch.nn.Module) else getattr(obj, "model", None)
        if not isinstance(model, torch.nn.Module):
            return {}
        params = list(model.parameters())
        return {
            "devices": sorted({str(p.device) for p in params}),
            "dtypes": sorted({str(p.dtype).replace("torch.", "") for p in params}),
            "class": type(model).__name__,
        }

    def probe(owner: Any, name: str, phase: str, inspect_result: bool = False, inspect_arg: bool = False):
        original = getattr(owner, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            entry: dict[str, Any] = {"phase": phase, "child_peak": 0.0}
            if inspect_arg and args:
                entry.update(describe(args[0]))
            stack.append(entry)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                stack.pop()
                if cuda:
                    torch.cuda.synchronize()
                    peak = max(torch.cuda.max_memory_allocated() / 2**20, entry["child_peak"])
                    entry["gpu_peak_mib"] = round(peak, 1)
                    entry["gpu_allocated_mib"] = round(torch.cuda.memory_allocated() / 2**20, 1)
                    if stack:
                        stack[-1]["child_peak"] = max(stack[-1]["child_peak"], peak)
                entry["seconds"] = round(time.perf_counter() - t0, 2)
                entry.pop("child_peak")
                phases.append(entry)
            if inspect_result:
                entry.update(describe(result))
            if phase.startswith("eval") and isinstance(result, dict):
                entry.update(
                    {k: result.get(k) for k in ("set", "solve_rate", "solved", "episodes", "invalid_action_rate")}
                )
            return result

        setattr(owner, name, wrapped)

    probe(local, "run_sft", "sft (incl. base model build)")
    probe(sftmod, "train_sft", "sft train loop", inspect_arg=True)
    probe(sftmod, "pretrain_vision", "sft vision pretraining", inspect_arg=True)
    probe(local, "build_generator", "build generator", inspect_result=True)
    probe(local, "build_policy", "build policy", inspect_result=True)
    probe(local, "run_rl_loop", "rl loop (incl. evaluations)")
    probe(local, "eval_step", "eval")
    stats: dict[str, Any] = {"argv": argv, "import_seconds": round(time.perf_counter() - t_start, 2), "cuda": cuda}
    rc: Any = "exception"
    try:
        rc = cli.main(argv)
        return int(rc or 0)
    finally:
        stats.update(rc=rc, seconds=round(time.perf_counter() - t_start, 2), phases=phases)
        if cuda:
            stats.update(
                gpu=torch.cuda.get_device_name(0), gpu_peak_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1)
            )
        Path(stats_path).write_text(json.dumps(stats, indent=2, default=str))


def cli_step(
    out: Path | None, work: Path, name: str, argv: list[str], timeout: float
) -> tuple[dict[str, Any], dict | None]:
    """Run one ``mazegym`` command in a probed child; returns (the step's info, the child's stats or None)."""
    stats_path = work / f"{name}.stats.json"
    stats_path.unlink(missing_ok=True)
    rc, seconds, tail = run_child(
        [str(Path(__file__).resolve()), "--cli-child", str(stats_path), "--", *argv], work / f"{name}.log", timeout
    )
    stats = read_json(stats_path)
    info: dict[str, Any] = {
        "command": "mazegym " + " ".join(argv),
        "rc": rc if rc is not None else f"timeout after {timeout:.0f}s",
        "wall_seconds": round(seconds, 1),
        "output_tail": tail,
    }
    if stats:
        info.update({k: stats.get(k) for k in ("import_seconds", "gpu", "gpu_peak_mib", "phases") if k in stats})
    return info, stats


def check_device(info: dict[str, Any], device: str) -> list[str]:
    """Problems with where the phases ran: every model built must be on ``device`` (and use GPU memory on cuda)."""
    problems = []
    for phase in info.get("phases") or []:
        devices = phase.get("devices")
        if devices and any(not d.startswith(device) for d in devices):
            problems.append(f"{phase['phase']}: parameters on {devices}, expected {device}")
    if device == "cuda" and not (info.get("gpu_peak_mib") or 0) > 0:
        problems.append("no GPU memory was allocated")
    return problems


def rl_summary(run_dir: Path) -> dict[str, Any]:
    """Eval numbers and the RL steps' key metrics from a run dir."""
    out: dict[str, Any] = {}
    results = read_json(run_dir / "eval_results.json") or {}
    for key in ("before_rl", "after_rl"):
        if isinstance(results.get(key), dict):
            r = results[key]
            out[key] = {k: r.get(k) for k in ("set", "solve_rate", "solved", "episodes", "spl", "invalid_action_rate")}
    sft = read_json(run_dir / "sft" / "sft_info.json")
    if sft:
        out["sft"] = {
            "steps": sft.get("steps"),
            "vision_steps": sft.get("vision_steps"),
            "seconds": round(sft.get("seconds", 0), 2),
            "final_loss": (sft.get("final") or {}).get("loss"),
        }
    keys = (
        "rollout/success_rate",
        "rollout/invalid_turn_rate",
        "train/num_turns",
        "train/optimizer_steps",
        "train/skipped",
        "train/loss",
        "train/grad_norm",
        "sync/parity_mean_abs",
        "time/generate",
        "time/update",
        "time/sync",
        "time/eval",
    )
    steps = []
    try:
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec.get("phase") == "rl":
                steps.append({"step": rec.get("step"), **{k: rec[k] for k in keys if k in rec}})
    except (OSError, ValueError):
        pass
    out["rl_steps"] = steps
    return out


def step_cli_train(
    out: Path | None, work: Path, device: str, timeout: float, preset: str, name: str, budget: list[str]
) -> Path:
    """Steps 1 and 4: ``mazegym train --preset PRESET`` at a tiny budget on ``device``; returns the run dir."""
    run_dir = work / f"run-{preset}"
    shutil.rmtree(run_dir, ignore_errors=True)
    argv = ["train", "--preset", preset, "--run-dir", str(run_dir), f"model.device={device}", *budget]
    info, stats = cli_step(out, work, name, argv, timeout)
    info.update(rl_summary(run_dir))
    problems = [] if info["rc"] == 0 else [f"exit code {info['rc']}"]
    problems += check_device(info, device)
    rl = info.get("rl_steps") or []
    if info["rc"] == 0 and not any(
        (s.get("train/num_turns") or 0) > 0 and (s.get("train/grad_norm") or 0) > 0 for s in rl
    ):
        problems.append("no RL step trained on any turn with a non-zero gradient")
    parity = [s["sync/parity_mean_abs"] for s in rl if "sync/parity_mean_abs" in s]
    if "loop.parity_every=1" in budget and info["rc"] == 0 and not parity:
        problems.append("no parity probe result recorded")
    if problems:
        info["problems"] = problems
    record(out, name, "FAIL" if problems else "PASS", info["wall_seconds"], **info)
    return run_dir


def step_cli_eval(out: Path | None, work: Path, device: str, timeout: float, run_dir: Path) -> None:
    """Step 2: ``mazegym eval --run-dir RUN``."""
    if not (run_dir / "config.json").is_file():
        record(out, "cli-eval", "SKIP", 0.0, reason=f"{run_dir} holds no run (cli-train did not get far enough)")
        return
    info, _ = cli_step(out, work, "cli-eval", ["eval", "--run-dir", str(run_dir)], timeout)
    data = read_json(run_dir / "eval" / "eval.json") or {}
    info["evaluated"] = data.get("evaluated")
    info["results"] = {
        name: {k: r.get(k) for k in ("solve_rate", "solved", "episodes", "spl", "invalid_action_rate", "mean_moves")}
        for name, r in (data.get("results") or {}).items()
    }
    problems = [] if info["rc"] == 0 else [f"exit code {info['rc']}"]
    problems += check_device(info, device)
    if info["rc"] == 0 and not info["results"]:
        problems.append("no eval.json results")
    if problems:
        info["problems"] = problems
    record(out, "cli-eval", "FAIL" if problems else "PASS", info["wall_seconds"], **info)


def step_cli_report(out: Path | None, work: Path, timeout: float, run_dir: Path) -> None:
    """Step 3: ``mazegym report RUN``; copies report.html to the output folder."""
    if not (run_dir / "config.json").is_file():
        record(out, "cli-report", "SKIP", 0.0, reason=f"{run_dir} holds no run (cli-train did not get far enough)")
        return
    info, _ = cli_step(out, work, "cli-report", ["report", str(run_dir)], timeout)
    html = run_dir / "report.html"
    problems = [] if info["rc"] == 0 else [f"exit code {info['rc']}"]
    if html.is_file():
        info["report_bytes"] = html.stat().st_size
        if out is not None and html.stat().st_size < 15 * 2**20:
            shutil.copy(html, out / "report.html")
            info["copied_to"] = str(out / "report.html")
    elif info["rc"] == 0:
        problems.append("report.html was not written")
    if problems:
        info["problems"] = problems
    record(out, "cli-report", "FAIL" if problems else "PASS", info["wall_seconds"], **info)


# ----------------------------------------------------------------------------- Qwen3-VL child
def qwen3_child(result_path: str, work_dir: str, device: str) -> int:
    """Child process: the Qwen3-VL preset on a tiny random Qwen3-VL, one local hf RL step; writes the result JSON."""
    t_start = time.perf_counter()
    result: dict[str, Any] = {"stage": "import"}

    def dump() -> None:
        Path(result_path).write_text(json.dumps(result, indent=2, default=str))

    try:
        import torch

        from mazegym.evalsets import MazeStream, load_eval_set
        from runners import build
        from runners.config import derived
        from runners.train import steps
        from runners.config import apply_overrides, validate
        from runners.config.presets import get_preset
        from runners.rollout.collect import evaluate_mazes
        from runners.train.sync import AdapterSync
        from runners.models.tiny import build_tiny_qwen3_vl

        cuda = device == "cuda"
        timings: dict[str, float] = {"import": round(time.perf_counter() - t_start, 2)}

        def lap(name: str, t0: float) -> None:
            if cuda:
                torch.cuda.synchronize()
            timings[name] = round(time.perf_counter() - t0, 2)
            result["timings"] = timings
            dump()

        work = Path(work_dir)
        t0 = time.perf_counter()
        result["stage"] = "build tiny Qwen3-VL"
        model_dir = build_tiny_qwen3_vl(work / "tiny_qwen3_vl")
        lap("build_model", t0)
        result["stage"] = "config"
        config = apply_overrides(
            get_preset("qwen3-vl-8b-lora32"),
            [f"model.path={model_dir}", f"model.device={device}", f"run_dir={work / 'qwen3-run'}", *QWEN3_OVERRIDES],
        )
        validate(config)
        result["config"] = {
            "preset": config.preset,
            "dtype": config.model.dtype,
            "device": config.model.device,
            "lora_rank": config.lora.rank,
            "algo": config.algo.name,
            "algo_params": config.algo.params,
            "history": config.rollout.history,
            "obs_mode": config.rollout.obs_mode,
        }
        if config.model.dtype == "bfloat16" and cuda and not torch.cuda.is_bf16_supported():
            raise RuntimeError("this GPU has no bf16 support")
        t0 = time.perf_counter()
        result["stage"] = "build generator + policy + algorithm"
        generator, policy, algorithm, probe = build.build_training(config, model_dir)
        lap("build_training", t0)
        params = list(policy.model.parameters())
        trainable = [p for p in params if p.requires_grad]
        result["policy"] = {
            "class": type(policy.model.get_base_model()).__name__,
            "devices": sorted({str(p.device) for p in params}),
            "frozen_dtypes": sorted({str(p.dtype) for p in params if not p.requires_grad}),
            "trainable_dtypes": sorted({str(p.dtype) for p in trainable}),
            "trainable_params": sum(p.numel() for p in trainable),
            "total_params": sum(p.numel() for p in params),
            "generator_dtype": str(generator.dtype),
            "generator_device": str(next(generator.model.parameters()).device),
        }
        # The preset's mazes (shortest paths up to its 20 moves); the episodes here stop after rollout.max_moves.
        stream = MazeStream(
            size=config.maze.size,
            seed=config.maze.stream_seed,
            generator=config.maze.generator,
            max_optimal_moves=get_preset("qwen3-vl-8b-lora32").rollout.max_moves,
        )
        t0 = time.perf_counter()
        result["stage"] = "generate (rollouts on images, full history)"
        episodes = steps.generate_step(generator, stream, config, step=1)
        lap("generate", t0)
        turns = [t for e in episodes for t in e.turns]
        result["rollouts"] = {
            "episodes": len(episodes),
            "turns": len(turns),
            "max_prompt_tokens": max((len(t.prompt_ids) for t in turns), default=0),
            "max_images_per_prompt": max((len(t.images) for t in turns), default=0),
            "success_rate": sum(e.success for e in episodes) / max(len(episodes), 1),
        }
        t0 = time.perf_counter()
        result["stage"] = "update (GRPO)"
        metrics = steps.update_step(algorithm, episodes, steps.vision_placeholder_ids(model_dir))
        lap("update", t0)
        result["update"] = {
            k: metrics.get(k)
            for k in (
                "loss",
                "grad_norm",
                "num_turns",
                "num_tokens",
                "optimizer_steps",
                "skipped",
                "dropped_placeholder_turns",
                "kept_episode_frac",
            )
        }
        t0 = time.perf_counter()
        result["stage"] = "sync + parity probe"
        sync = steps.sync_step(policy, generator, AdapterSync(work / "qwen3-sync"), 1, probe)
        lap("sync", t0)
        result["sync"] = {**sync, "tolerance": probe.tolerance if probe is not None else None}
        t0 = time.perf_counter()
        result["stage"] = "greedy play of 4 evaluation mazes"
        evals = evaluate_mazes(generator, load_eval_set(config.maze.eval_set)[:4], derived.rollout_config(config))
        lap("eval_4_mazes", t0)
        result["eval_4_mazes"] = {
            "set": config.maze.eval_set,
            "solved": sum(e.success for e in evals),
            "episodes": len(evals),
        }
        if cuda:
            result["gpu_peak_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        ok = (
            metrics.get("optimizer_steps", 0) >= 1
            and metrics.get("grad_norm", 0) > 0
            and "sync/parity_mean_abs" in sync
            and all(d.startswith(device) for d in result["policy"]["devices"])
        )
        result["stage"] = "done"
        result["status"] = "PASS" if ok else "FAIL"
        if not ok:
            result["reason"] = (
                "no optimizer step with a non-zero gradient, no parity result, or parameters off the device"
            )
        return 0
    except Exception as exc:
        import traceback

        result["status"] = "FAIL"
        result["reason"] = f"at stage '{result.get('stage')}': {type(exc).__name__}: {exc}"[:800]
        result["traceback"] = traceback.format_exc()[-2500:]
        return 1
    finally:
        result["child_seconds"] = round(time.perf_counter() - t_start, 2)
        dump()


def step_qwen3(out: Path | None, work: Path, device: str, timeout: float) -> None:
    """Step 5: the Qwen3-VL recipe in miniature, in a child process."""
    if device != "cuda":
        note = "CPU rehearsal (bf16 on CPU)"
    else:
        note = None
    result_path = work / "qwen3.json"
    result_path.unlink(missing_ok=True)
    rc, seconds, tail = run_child(
        [str(Path(__file__).resolve()), "--qwen3-child", str(result_path), str(work), device],
        work / "qwen3-vl-rl.log",
        timeout,
    )
    result = read_json(result_path) or {}
    status = result.pop("status", "FAIL")
    if rc is None:
        status, result["reason"] = "FAIL", f"timed out after {timeout:.0f}s at stage '{result.get('stage')}'"
    elif status != "PASS" and "reason" not in result:
        result["reason"] = f"child exited with code {rc} before writing a result"
    if note:
        result["note"] = note
    record(out, "qwen3-vl-rl", status, seconds, **result, output_tail=tail)


# ----------------------------------------------------------------------------- main
STEPS = ("cli-train", "cli-eval", "cli-report", "qwen3-vl-rl", "cli-train-maze-vlm")
"""The steps, in the order they run (the optional MazeVLM run last)."""


def pick_device(requested: str) -> str:
    """``cuda`` or ``cpu``; ``auto`` asks torch in a child process (this process never imports torch)."""
    if requested != "auto":
        return requested
    code = "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return done.stdout.strip() or "cpu"
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"


def main(argv: list[str] | None = None) -> int:
    """Run the steps (children with time limits), print the summary, write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--cli-child"]:
        return cli_child(argv[1], argv[3:] if argv[2:3] == ["--"] else argv[2:])
    if argv[:1] == ["--qwen3-child"]:
        return qwen3_child(argv[1], argv[2], argv[3])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--out", default=os.environ.get("OUT"), help="folder for gpu_train_check.json and report.html (default $OUT)"
    )
    parser.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"), help="model.device of every run")
    parser.add_argument("--workdir", default=None, help="where runs and logs go (default: a temp dir)")
    parser.add_argument("--only", nargs="*", default=None, choices=STEPS, help="run only these steps")
    parser.add_argument("--timeout", type=float, default=120, help="seconds each child may take (the report: half)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a step fails")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpu_train_check_"))
    work.mkdir(parents=True, exist_ok=True)
    device = pick_device(args.device)
    wanted = set(args.only or STEPS)
    print(f"device={device} workdir={work} out={out}", flush=True)
    run_dir = work / "run-cpu-tiny"
    steps = {
        "cli-train": lambda: step_cli_train(out, work, device, args.timeout, "cpu-tiny", "cli-train", TRAIN_BUDGET),
        "cli-eval": lambda: step_cli_eval(out, work, device, args.timeout, run_dir),
        "cli-report": lambda: step_cli_report(out, work, args.timeout / 2, run_dir),
        "qwen3-vl-rl": lambda: step_qwen3(out, work, device, args.timeout),
        "cli-train-maze-vlm": lambda: step_cli_train(
            out, work, device, args.timeout, "cpu-maze-vlm", "cli-train-maze-vlm", MAZE_VLM_BUDGET
        ),
    }
    for name in STEPS:
        if name not in wanted:
            continue
        print(f"\n=== {name} ===", flush=True)
        t0 = time.perf_counter()
        try:
            steps[name]()
        except Exception as exc:  # a bug of this harness: report it as the step's failure and go on
            import traceback

            record(
                out,
                name,
                "FAIL",
                time.perf_counter() - t0,
                reason=f"check harness error: {exc!r}"[:500],
                output_tail=traceback.format_exc()[-2000:],
            )
    print("\n=== summary ===", flush=True)
    for r in RESULTS:
        detail = r.get("reason") or "; ".join(r.get("problems") or []) or r.get("headline") or ""
        print(f"{r['status']:5s} {r['step']:20s} {r['seconds']:7.1f}s  {str(detail)[:150]}", flush=True)
    save(out)
    failed = any(r["status"] == "FAIL" for r in RESULTS)
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU check of the Ray runner: 1 GPU, colocated vLLM engine + training rank, NCCL, FSDP2, sleep/wake.

Prepared for a machine with one CUDA GPU; ``vllm`` and ``ray`` are needed only by checks 3-4.
Nothing is downloaded: the tiny Qwen2 model is built locally. Four checks, each reported
PASS / FAIL / SKIP with the reason, then a JSON summary (``--json PATH``, default
``$OUT/gpu_ray_check.json``; rewritten after every check, so a killed run leaves what it did)::

    python scripts/gpu_ray_check.py --json gpu_ray_check.json

1. ``environment``  torch sees a GPU (and NCCL); which of vllm / ray import.
2. ``fsdp2_nccl``   ``runners.distributed.fsdp`` on the NCCL backend (world size 1, in a child process): a bf16
                    model with an fp32 LoRA sharded with FSDP2, one lockstep update (recomputed
                    old log-probs and a KL reference forward, two optimizer steps), the full
                    adapter gathered, written and loaded back into a fresh sharded policy. Needs
                    only CUDA. ``--cpu-rehearsal`` runs it on gloo + CPU where there is no GPU.
3. ``vllm_sleep``   a vLLM engine with sleep mode frees GPU memory on ``sleep(level=1)`` and
                    samples again after ``wake_up()``.
4. ``ray_runner``   ``runners.distributed.ray_runner.train`` on 1 GPU: vLLM backend, NCCL process group,
                    engine asleep during updates, adapter sync + parity probe every step.

On a machine without a GPU (or without vllm / ray) every check that needs it is SKIPPED with
a clear message and the script exits 0; it exits 1 only when a check that could run failed
(``--no-fail-exit``: always 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _result(status: str, **info) -> dict:
    return {"status": status, **info}


def check_environment() -> dict:
    """GPU visible to torch, vllm and ray importable."""
    info: dict = {}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.is_available()
        if info["cuda"]:
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception as exc:
        return _result("FAIL", reason=f"torch import failed: {exc!r}")
    for mod in ("vllm", "ray"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as exc:
            info[mod] = None
            info[f"{mod}_error"] = repr(exc)[:200]
    try:
        import torch.distributed as dist

        info["nccl"] = bool(dist.is_available() and dist.is_nccl_available())
        if info["nccl"] and info["cuda"]:
            info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception as exc:
        info["nccl"] = False
        info["nccl_error"] = repr(exc)[:200]
    if not info["cuda"]:
        return _result("SKIP", reason="no CUDA GPU visible to torch", **info)
    return _result("PASS", **info)


def missing_for(name: str, env: dict) -> str | None:
    """Why check ``name`` cannot run here (None when it can): it needs CUDA, and vllm / ray for checks 3-4."""
    if not env.get("cuda"):
        return "no CUDA GPU visible to torch"
    needs = {"fsdp2_nccl": (), "vllm_sleep": ("vllm",), "ray_runner": ("vllm", "ray")}[name]
    if name == "fsdp2_nccl" and not env.get("nccl"):
        return "torch.distributed has no NCCL backend here"
    missing = [m for m in needs if env.get(m) is None]
    if missing:
        errors = "; ".join(f"import {m}: {env.get(m + '_error', '?')}" for m in missing)
        return f"not installed: {', '.join(missing)} ({errors})"
    return None


def build_tiny(out: Path) -> Path:
    """The tiny Qwen2 text LM (head_dim 64) used by every check."""
    from runners.models import tiny

    if not (out / "config.json").is_file():
        tiny.build_tiny_text_lm(out, seed=0)
    return out


def _fsdp2_child(model_dir: str, queue, backend: str = "nccl", device: str = "cuda") -> None:
    """runners.distributed.fsdp on one rank: shard a bf16 model with an fp32 LoRA (the GPU preset's dtypes), one
    lockstep update, gather the adapter, write it, load it into a fresh sharded policy."""
    import datetime

    import torch
    import torch.distributed as dist

    import algos
    from algos.data import Episode, Turn
    from algos.policies.lm import LoRAConfig, LoRALMPolicy
    from runners.distributed import fsdp

    try:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        dist.init_process_group(backend, rank=0, world_size=1, timeout=datetime.timedelta(seconds=120))
        if device == "cuda":
            torch.cuda.set_device(0)

        def build():
            torch.manual_seed(0)
            return fsdp.shard_policy(
                LoRALMPolicy.from_pretrained(
                    model_dir, LoRAConfig(rank=8, alpha=16), dtype=torch.bfloat16, device=device
                )
            )

        policy = build()
        # Recomputed old log-probs and a KL reference: the no-grad (S) units run on the GPU too.
        algorithm = algos.make(
            "grpo", policy, lr=1e-3, micro_batch_size=2, minibatch_size=4, old_logprobs="recompute", kl_coef=0.05
        )
        lockstep = fsdp.Lockstep(policy, algorithm)
        g = torch.Generator().manual_seed(0)
        episodes = [
            Episode(
                turns=[
                    Turn(
                        prompt_ids=torch.randint(10, 200, (12,), generator=g).tolist(),
                        response_ids=torch.randint(10, 200, (4,), generator=g).tolist(),
                        logprobs=[-1.0] * 4,
                        reward=float(i % 2),
                    )
                ]
                * 2,
                group_id=0,
            )
            for i in range(4)
        ]
        with lockstep.update():
            metrics = algorithm.update(episodes)
        full = fsdp.gather_adapter(policy)
        out = Path(tempfile.mkdtemp(prefix="fsdp_adapter_"))
        fsdp.save_full_adapter(policy, full, out)
        fresh = build()
        fresh.load_adapter(out)
        same = all(torch.equal(full[k], v) for k, v in fsdp.gather_adapter(fresh).items())
        ok = same and metrics["optimizer_steps"] >= 2 and all(torch.isfinite(v).all() for v in full.values())
        info = dict(
            loss=float(metrics["loss"]),
            grad_norm=metrics["grad_norm"],
            kl=metrics.get("kl"),
            optimizer_steps=metrics["optimizer_steps"],
            lora_tensors=len(full),
            reload_identical=same,
            dtypes=sorted({str(p.dtype) for p in policy.model.parameters()}),
            backend=dist.get_backend(),
            param_device=str(policy.device),
        )
        if device == "cuda":
            info["max_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        queue.put(_result("PASS" if ok else "FAIL", **info))
        dist.destroy_process_group()
    except Exception as exc:
        queue.put(_result("FAIL", reason=repr(exc)[:500], traceback=traceback.format_exc()[-2000:]))


def _free_port() -> int:
    """A TCP port free on this host right now (the process-group rendezvous)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_fsdp2_nccl(model_dir: Path, backend: str = "nccl", device: str = "cuda", timeout: float = 300) -> dict:
    """runners.distributed.fsdp (FSDP2 + PEFT LoRA, lockstep update, adapter gather/save/load) on NCCL, in a child
    process."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    proc = ctx.Process(target=_fsdp2_child, args=(str(model_dir), queue, backend, device))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        return _result("FAIL", reason=f"timed out after {timeout:.0f} s")
    return queue.get() if not queue.empty() else _result("FAIL", reason=f"child exited with code {proc.exitcode}")


def check_vllm_sleep(model_dir: Path) -> dict:
    """Sleep mode: memory freed while asleep, sampling works after waking."""
    import torch

    from runners.rollout.generation.base import Prompt, SamplingConfig
    from runners.rollout.generation.vllm import VLLMGenerator

    gen = VLLMGenerator(str(model_dir), enable_sleep_mode=True, gpu_memory_utilization=0.3, max_lora_rank=16)
    prompt = Prompt(prompt_ids=gen.encoder.encode([{"role": "user", "content": "hello"}])[0])
    before = gen.generate([prompt], SamplingConfig(max_new_tokens=8, temperature=0.0))[0]
    free_awake = torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    gen.llm.sleep(level=1)
    sleep_s = time.perf_counter() - t0
    free_asleep = torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    gen.llm.wake_up()
    wake_s = time.perf_counter() - t0
    after = gen.generate([prompt], SamplingConfig(max_new_tokens=8, temperature=0.0))[0]
    freed_gib = (free_asleep - free_awake) / 2**30
    ok = freed_gib > 0.1 and after.response_ids == before.response_ids
    return _result(
        "PASS" if ok else "FAIL",
        freed_gib=round(freed_gib, 3),
        sleep_s=round(sleep_s, 3),
        wake_s=round(wake_s, 3),
        same_greedy_reply_after_wake=after.response_ids == before.response_ids,
    )


def check_ray_runner(workdir: Path, steps: int) -> dict:
    """The Ray runner end to end on 1 GPU with the vLLM backend."""
    import ray

    from runners.distributed import ray_runner
    from runners.config import apply_overrides
    from runners.config.presets import get_preset

    run_dir = workdir / "ray_gpu_run"
    cfg = apply_overrides(
        get_preset("cpu-tiny"),
        [
            f"run_dir={run_dir}",
            "model.device=cuda",
            "model.dtype=float32",
            "engine.name=vllm",
            "sft.steps=150",
            f"loop.steps={steps}",
            "loop.mazes_per_step=4",
            "rollout.group_size=8",
            "loop.parity_every=1",
            "eval.every=0",
            "checkpoint.every=2",
            "logging.progress=false",
            "runner.num_threads=0",
            "runner.kind=ray",
            "runner.num_workers=1",
            "runner.num_gpus=1",
            "engine.gpu_memory_utilization=0.3",
        ],
    )
    ray.init(address="local", include_dashboard=False, log_to_driver=True)
    try:
        t0 = time.perf_counter()
        result = ray_runner.train(cfg)
        wall = time.perf_counter() - t0
    finally:
        ray.shutdown()
    from runners.train.metrics import read_jsonl

    recs = read_jsonl(run_dir / "metrics.jsonl", phase="rl")
    workers = json.loads((run_dir / "ray_workers.json").read_text())
    last = recs[-1]
    ok = result.steps == steps and workers[0]["dist_backend"] == "nccl" and last.get("sync/parity_mean_abs", 1.0) < 1e-2
    return _result(
        "PASS" if ok else "FAIL",
        steps=result.steps,
        backend=workers[0]["dist_backend"],
        wall_s=round(wall, 1),
        parity_mean_abs=last.get("sync/parity_mean_abs"),
        solve_before=(result.before or {}).get("solve_rate"),
        solve_after=result.after["solve_rate"],
        step_s={
            k: round(statistics_mean([r[k] for r in recs[1:] if k in r]), 3)
            for k in ("time/generate", "time/update", "time/sync", "sync/load_s")
        },
    )


def statistics_mean(values: list) -> float:
    """Mean, NaN for an empty list."""
    return sum(values) / len(values) if values else float("nan")


def main() -> int:
    """Run the checks in order, print PASS/FAIL/SKIP lines and a JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="RL steps of the Ray runner check")
    out_dir = os.environ.get("OUT")
    parser.add_argument(
        "--json",
        default=str(Path(out_dir) / "gpu_ray_check.json") if out_dir else None,
        help="write the summary here (default $OUT/gpu_ray_check.json when $OUT is set)",
    )
    parser.add_argument(
        "--workdir", default=None, help="where to build the tiny model and the run (default: a temp dir)"
    )
    parser.add_argument("--fsdp-timeout", type=float, default=300, help="seconds the FSDP2 child may take")
    parser.add_argument(
        "--cpu-rehearsal",
        action="store_true",
        help="without a GPU, run the FSDP2 check on gloo + CPU (same code, bf16 on CPU) instead of skipping it",
    )
    parser.add_argument("--no-fail-exit", action="store_true", help="exit 0 even when a check failed")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gpu_ray_check_"))
    report: dict = {}

    def save() -> None:
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(report, indent=2, default=str))

    def show(name: str) -> None:
        res = report[name]
        extra = {k: v for k, v in res.items() if k not in ("status", "traceback")}
        print(f"[{res['status']:>4}] {name}: {json.dumps(extra, default=str)}", flush=True)
        if res.get("traceback"):
            print(res["traceback"], flush=True)
        save()

    report["environment"] = check_environment()
    show("environment")
    env = {k: v for k, v in report["environment"].items() if k != "status"}
    rehearse = args.cpu_rehearsal and not env.get("cuda")
    checks = [
        (
            "fsdp2_nccl",
            lambda m: check_fsdp2_nccl(
                m, *(("gloo", "cpu") if rehearse else ("nccl", "cuda")), timeout=args.fsdp_timeout
            ),
        ),
        ("vllm_sleep", lambda m: check_vllm_sleep(m)),
        ("ray_runner", lambda m: check_ray_runner(workdir, args.steps)),
    ]
    model_dir = None
    for name, fn in checks:
        why = missing_for(name, env)
        if why is not None and not (rehearse and name == "fsdp2_nccl"):
            report[name] = _result("SKIP", reason=why)
            show(name)
            continue
        t0 = time.perf_counter()
        try:
            model_dir = model_dir or build_tiny(workdir / "tiny_model")
            report[name] = fn(model_dir)
        except Exception as exc:
            report[name] = _result("FAIL", reason=repr(exc)[:500], traceback=traceback.format_exc()[-2000:])
        report[name]["seconds"] = round(time.perf_counter() - t0, 1)
        if rehearse and name == "fsdp2_nccl":
            report[name]["note"] = "CPU rehearsal: gloo backend on CPU, not NCCL"
        show(name)
    print("\n=== summary ===", flush=True)
    for name, res in report.items():
        print(
            f"{res['status']:5s} {name:12s} {res.get('seconds', 0):7.1f}s  {str(res.get('reason', ''))[:150]}",
            flush=True,
        )
    failed = any(r["status"] == "FAIL" for r in report.values())
    return 1 if failed and not args.no_fail_exit else 0


if __name__ == "__main__":
    raise SystemExit(main())

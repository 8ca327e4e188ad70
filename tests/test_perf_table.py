"""The script mode of benchmarks/bench_env.py and the README block of benchmarks/perf_table.py (seconds)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # perf_table imports bench_env from its own folder
_spec = importlib.util.spec_from_file_location("perf_table", ROOT / "benchmarks" / "perf_table.py")
perf_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(perf_table)


def test_bench_env_script_writes_positive_steps_per_second(tmp_path):
    out = tmp_path / "env.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_env.py"), "--seconds", "0.05", "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "steps/s" in proc.stdout and " ms " in proc.stdout
    data = json.loads(out.read_text())
    for mode in ("image", "text", "both"):
        assert data["steps_per_s"][mode]["median"] > 0 and data["steps_per_s"][mode]["best"] > 0
    assert data["reset_ms"]["9x9 wilson"]["median"] > 0
    assert data["machine"]["cpu_count"] >= 1 and len(data["loadavg_start"]) == len(data["loadavg_end"]) == 3
    assert not list(tmp_path.glob("*.tmp"))


def test_readme_block_replacement_is_idempotent_and_keeps_other_rows(tmp_path):
    readme = tmp_path / "README.md"
    original = (ROOT / "benchmarks" / "README.md").read_text()
    readme.write_text(original)
    start, end = original.index(perf_table.START), original.index(perf_table.END) + len(perf_table.END)
    env = perf_table.bench_env.run_all(0.01)
    rows = perf_table.env_rows(env, 0.01)
    block = perf_table.header(env, env["loadavg_end"], "") + "\n\n" + perf_table.markdown(rows)

    once = perf_table.replace_block(readme.read_text(), block)
    twice = perf_table.replace_block(once, block)
    assert once == twice
    assert once.startswith(original[:start]) and once.endswith(original[end:])
    assert "steps/s" in once[start : len(once) - len(original[end:])]
    assert "| VisMaze vs MiniGrid" in original[end:]  # the hand-copied rows sit outside the block

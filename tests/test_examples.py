"""The teaching gallery must keep running: each fast example is executed as a user would run it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``examples/<name>`` in a fresh interpreter; fail with its output if it exits non-zero."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_play_random_writes_a_gif(tmp_path):
    gif = tmp_path / "random.gif"
    out = run_example("01_play_random.py", "--seed", "3", "--gif", str(gif), cwd=tmp_path)
    assert gif.stat().st_size > 0
    assert "#" in out.stdout  # the ASCII map was printed


@pytest.mark.parametrize("obs_mode", ["both", "text"])
def test_text_and_image_obs_example(tmp_path, obs_mode):
    run_example("02_text_and_image_obs.py", "--obs-mode", obs_mode, "--png", str(tmp_path / "f.png"), cwd=tmp_path)


def test_custom_algorithm_example_registers_and_updates(tmp_path):
    run_example("03_custom_algorithm.py", cwd=tmp_path)


def test_credit_assignment_example_shows_gigpo_separating_good_from_bad_moves(tmp_path):
    out = run_example("06_credit_assignment.py", "--shaping", cwd=tmp_path).stdout
    rows = {line[:34].strip(): line[34:].split() for line in out.splitlines() if line.startswith(("GRPO", "GiGPO"))}
    grpo, gigpo = rows["GRPO (episode return)"], rows["GiGPO (episode + anchor states)"]
    assert float(gigpo[0]) > 0 > float(gigpo[1])
    assert float(gigpo[3].rstrip("%")) > float(grpo[3].rstrip("%"))

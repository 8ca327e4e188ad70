"""One writer per run dir: a second `mazegym train`, `sft` or `export` on a run dir in use is refused, naming the
holder, before it changes anything; a killed holder leaves no stale lock."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from runners.train.run_lock import HOLDER_FILE, RunDirBusy, run_dir_lock

ROOT = Path(__file__).resolve().parents[2]
HOLD = (
    "import sys, time\n"
    "from runners.train.run_lock import run_dir_lock\n"
    "with run_dir_lock(sys.argv[1], 'mazegym train --run-dir HELD'):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(120)\n"
)


@pytest.fixture
def holder(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "held"
    yield run, proc
    proc.kill()
    proc.wait()


def test_a_second_writer_is_refused_naming_the_holder(holder):
    run, proc = holder
    with pytest.raises(RunDirBusy, match=f"pid {proc.pid} on {platform.node()}.*mazegym train --run-dir HELD"):
        with run_dir_lock(run):
            pass


@pytest.mark.parametrize(
    "command",
    [
        ["train", "loop.steps=1", "sft.steps=1", "model.vision_pretraining.steps=1", "logging.calibration_seconds=0"],
        ["sft", "sft.steps=1", "model.vision_pretraining.steps=1", "--no-eval"],
        ["export"],
    ],
)
def test_cli_commands_that_write_refuse_and_change_nothing(holder, command):
    run, proc = holder
    before = sorted(p.name for p in run.iterdir())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "runners.cli", command[0], "--run-dir", str(run), *command[1:]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"in use by pid {proc.pid}" in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written, nothing deleted


def test_a_killed_holder_leaves_no_stale_lock(holder):
    run, proc = holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with run_dir_lock(run) as root:  # the kernel released the dead process's lock
        assert (root / HOLDER_FILE).is_file()
    assert not (run / HOLDER_FILE).exists()


def test_the_lock_is_reentrant_within_a_process(tmp_path):
    with run_dir_lock(tmp_path / "run"):
        with run_dir_lock(tmp_path / "run"):
            pass
        assert (tmp_path / "run" / HOLDER_FILE).is_file()  # still held by the outer block
    assert not (tmp_path / "run" / HOLDER_FILE).exists()

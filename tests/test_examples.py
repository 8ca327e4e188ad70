"""The teaching gallery must keep running: each example is executed as a user would run it, with its
``--smoke`` budget, and must write valid pictures; the learning examples must beat their baselines."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def run_example(name: str, *args: str, cwd: Path) -> str:
    """Run ``examples/<name>`` in a fresh interpreter; return its stdout, fail with its output on error."""
    env = dict(os.environ, OMP_NUM_THREADS="1")  # PYTHONPATH is inherited, so a worktree tests its own code
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def assert_image(path: Path, frames: int = 1) -> None:
    """``path`` is a readable image with at least ``frames`` frames."""
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert getattr(image, "n_frames", 1) >= frames and min(image.size) > 16


def numbers(pattern: str, text: str) -> list[float]:
    """All floats captured by ``pattern`` in ``text`` (the examples print measured figures)."""
    found = re.findall(pattern, text)
    return [float(x) for group in found for x in (group if isinstance(group, tuple) else (group,))]


def test_quickstart_oracle_beats_random(tmp_path):
    out = run_example("01_quickstart.py", "--smoke", "--out", str(tmp_path), cwd=tmp_path)
    random_rate, oracle_rate = numbers(r"solved (\d+)%", out)
    assert oracle_rate >= random_rate + 50
    assert_image(tmp_path / "01_random_vs_oracle.gif", frames=5)
    import gymnasium as gym

    import mazegym  # noqa: F401  (registers VisMaze-v0)

    env = gym.make("VisMaze-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()  # one panel of the GIF, untitled
    with Image.open(tmp_path / "01_random_vs_oracle.gif") as gif:
        top = [gif.convert("RGB").getpixel((x, y)) for x in range(gif.size[0]) for y in range(10)]
        assert gif.size[1] > frame.shape[0] + 10, "a title strip over the random and oracle panels"
    assert min(sum(p) for p in top) < 200, "the panel titles are drawn (black text on white)"


def test_play_by_hand_help_only(tmp_path):
    assert "arrow keys" in run_example("02_play_by_hand.py", "--help", cwd=tmp_path)


def test_play_by_hand_without_a_terminal_says_so_in_one_line(tmp_path):
    """Without a TTY on stdin it was a termios.error traceback."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "02_play_by_hand.py")],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--window" in proc.stderr


def test_sb3_ppo_runs_through_the_image_wrapper(tmp_path):
    pytest.importorskip("stable_baselines3", reason="stable-baselines3 is in the `sb3` and `test` extras")
    run_example("03_sb3_ppo.py", "--smoke", "--out", str(tmp_path), cwd=tmp_path)
    assert_image(tmp_path / "03_sb3_learning_curve.png")


def test_grpo_and_ppo_both_learn(tmp_path):
    out = run_example("04_grpo_vs_ppo.py", "--smoke", "--out", str(tmp_path), cwd=tmp_path)
    for name in ("grpo", "ppo"):
        line = next(line for line in out.splitlines() if line.startswith(f"{name}:"))
        curve = numbers(r"u\d+=([\d.]+)", line)
        assert curve[-1] >= curve[0] + 0.08, f"{name} did not learn: {line}"
    assert_image(tmp_path / "04_grpo_vs_ppo.png")


def test_custom_algorithm_beats_random(tmp_path):
    out = run_example("05_custom_algorithm.py", "--smoke", "--out", str(tmp_path), cwd=tmp_path)
    random_rate, before, after = numbers(r"random agent ([\d.]+), before ([\d.]+), after \d+ updates ([\d.]+)", out)
    assert after >= max(random_rate, before) + 0.1, out
    assert_image(tmp_path / "05_reinforce_curve.png")
    assert_image(tmp_path / "05_reinforce_solves.gif", frames=2)


def test_report_and_replays_from_eval_records(tmp_path):
    from mazegym import load_eval_set
    from mazegym.recording import maze_grid

    run_example("06_report_and_replays.py", "--smoke", "--out", str(tmp_path), cwd=tmp_path)
    assert_image(tmp_path / "06_eval_grid.png")
    with Image.open(tmp_path / "06_eval_grid.png") as grid:
        plain = maze_grid(load_eval_set("heldout-7x7"), [True] * 64)
        assert grid.size[1] > plain.shape[0] + 20, "'before RL' / 'after RL' titles and a legend around the grids"
    assert_image(tmp_path / "06_replays.gif", frames=2)
    assert "<img" in (tmp_path / "06_run" / "report.html").read_text()


def test_race_oracle_wins(tmp_path):
    out = run_example("07_race.py", "--smoke", "--out", str(tmp_path), cwd=tmp_path)
    assert "'agent_0': 3" in out
    assert_image(tmp_path / "07_race.gif", frames=3)
    with Image.open(tmp_path / "07_race.gif") as gif:
        assert gif.size[1] > gif.size[0]  # the square maze over its legend of the discs' colours


@pytest.mark.parametrize("obs_mode", ["both", "text"])
def test_what_the_model_sees(tmp_path, obs_mode):
    run_example("08_what_the_model_sees.py", "--obs-mode", obs_mode, "--out", str(tmp_path), cwd=tmp_path)
    assert_image(tmp_path / "08_first_frame.png")


def test_credit_assignment_example_shows_gigpo_separating_good_from_bad_moves(tmp_path):
    out = run_example("09_credit_assignment.py", "--shaping", cwd=tmp_path)
    rows = {line[:34].strip(): line[34:].split() for line in out.splitlines() if line.startswith(("GRPO", "GiGPO"))}
    grpo, gigpo = rows["GRPO (episode return)"], rows["GiGPO (episode + anchor states)"]
    assert float(gigpo[0]) > 0 > float(gigpo[1])
    assert float(gigpo[3].rstrip("%")) > float(grpo[3].rstrip("%"))


def test_train_from_python_runs_sft_rl_and_plots(tmp_path):
    out = run_example(
        "10_train_from_python.py", "--smoke", "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path), cwd=tmp_path
    )
    assert "SFT (before RL)" in out and "after RL" in out
    assert re.search(r"solved at each evaluation: \[\d+(, \d+){2}\] \(steps \[0, 1, 2\]\)", out)
    assert (tmp_path / "run" / "eval_results.json").is_file()
    assert_image(tmp_path / "10_cpu-maze-vlm_curve.png")


def test_lm_rl_step_runs_every_phase(tmp_path):
    out = run_example("11_lm_rl_step.py", "--smoke", "--out", str(tmp_path), cwd=tmp_path)
    assert numbers(r"step (\d+): \d+ branches", out) == [1.0, 2.0]  # collect -> update -> publish/load, twice
    assert len(numbers(r"solve rate ([0-9.]+)", out)) == 3  # before, and after each step
    assert_image(tmp_path / "lm_rl_step.png")


@pytest.mark.slow
def test_trl_grpo_smoke_trains_and_evaluates_on_the_fixed_set(tmp_path):
    pytest.importorskip("trl", reason="needs the trl extra: pip install -e '.[trl]'")
    out = run_example("12_trl_grpo.py", "--smoke", "--out", str(tmp_path / "trl"), cwd=tmp_path)
    assert re.search(r"solve rate on 4 mazes of VisMaze-v0: [0-9.]+", out)

"""The mazegym command line: help for every subcommand, dry run of the 8B preset, config errors, play."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mazegym import manual_control
from runners import cli

SUBCOMMANDS = ["train", "sft", "eval", "serve", "serve-env", "play-remote", "report", "play", "export", "presets"]


def _run_main(argv, capsys):
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_entry_point_help_teaches_the_tool():
    exe = Path(sys.executable).with_name("mazegym")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "runners.cli"]
    out = subprocess.run(
        cmd + ["--help"], capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert out.returncode == 0, out.stderr
    for word in SUBCOMMANDS + ["mazegym train", "--dry-run", "loop.mazes_per_step=32", "KEY=VALUE"]:
        assert word in out.stdout


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_each_subcommand_has_help(sub, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([sub, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert f"usage: mazegym {sub}" in text
    if sub in ("train", "sft", "eval", "export"):
        # the keys of the settings every run has and of the chosen parts, their values and their help
        assert "rollout.group_size = 8" in text and "GRPO group" in text
        assert "[model: maze-vlm (model kind model.kind=maze-vlm)]" in text and "model.vision_width = 32" in text
        assert "[rollout.collector: branches" in text and "rollout.collector.samples = 32" in text
        assert "[algo: grpo (its hyperparameters, algo.<field>=value)]" in text and "algo.clip_eps_low = " in text
        assert "[runner: local" in text and "runner.num_workers" not in text  # the Ray runner's: --help-all
        assert "--help-all" in text


def test_help_lists_the_parts_the_command_line_chose_and_help_all_every_part(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--preset", "cpu-tiny", "runner.kind=ray", "--help"])
    text = capsys.readouterr().out
    assert "[model: text" in text and "model.vision_width" not in text and "runner.num_workers = 1" in text
    with pytest.raises(SystemExit) as exc:
        cli.main(["train", "--preset", "cpu-tiny", "--help-all"])
    text = capsys.readouterr().out
    assert exc.value.code == 0 and "usage: mazegym train" in text
    for part in (
        "[model: maze-vlm (model.kind=maze-vlm)]",
        "[rollout.collector: branches",
        "[runner: ray",
        "[algo: ppo",
    ):
        assert part in text, part


def test_train_help_shows_values_of_the_chosen_preset(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--preset", "qwen3-vl-8b-lora32", "--help"])
    text = capsys.readouterr().out
    assert "values for preset qwen3-vl-8b-lora32" in text and "lora.rank = 32" in text
    assert "[engine: vllm" in text and "engine.gpu_memory_utilization = 0.5" in text


def test_dry_run_of_the_8b_preset_prints_the_plan_without_gpu(capsys, tmp_path):
    code, out, err = _run_main(
        ["train", "--preset", "qwen3-vl-8b-lora32", "--dry-run", f"run_dir={tmp_path / 'r'}"], capsys
    )
    assert code == 0, err
    assert "Plan for preset 'qwen3-vl-8b-lora32'" in out
    assert "LoRA rank 32" in out and "6 GPU(s)" in out and "grpo" in out and "engine vllm" in out
    assert "32 mazes x 8 rollouts = 256 episodes" in out
    assert "model.path = " in out  # the resolved config is printed
    assert not (tmp_path / "r").exists(), "a dry run must not create the run dir"


def test_choosing_an_algorithm_is_one_setting_on_a_preset_of_a_scheme_it_trains_on(capsys, tmp_path):
    """Every registered algorithm runs on the default preset's branching rollouts or on the preset for episode plays;
    an algorithm that cannot branch is refused on the default preset, naming the preset to use. Nothing is rewritten:
    the dry run prints the config as it runs."""
    import algos

    for name in algos.available():
        code, out, err = _run_main(["train", "--dry-run", f"algo.name={name}", f"run_dir={tmp_path / 'r'}"], capsys)
        if "branching" in algos.rollout_schemes(name):
            assert code == 0 and 'rollout.collector.name = "branches"' in out, f"{name}: {err}"
        else:
            assert code == 2 and "use --preset cpu-maze-loops-plays" in err, name
        assert "  note " not in out
        argv = ["train", "--dry-run", "--preset", "cpu-maze-loops-plays", f"algo.name={name}"]
        code, out, err = _run_main([*argv, f"run_dir={tmp_path / 'r'}"], capsys)
        assert code == 0 and 'rollout.collector.name = "plays"' in out, f"{name}: {err}"


def test_dry_run_says_when_sft_starts_from_a_checkpoint(capsys, tmp_path):
    start = tmp_path / "start"
    start.mkdir()
    code, out, _ = _run_main(["train", "--dry-run", f"sft.checkpoint={start}", f"run_dir={tmp_path / 'r'}"], capsys)
    assert code == 0 and f"no SFT (the start is sft.checkpoint={start}) -> RL grpo" in out
    code, out, _ = _run_main(["train", "--dry-run", f"run_dir={tmp_path / 'r'}"], capsys)
    assert "SFT (vision pretraining" in out


def test_dry_run_notes_the_settings_of_a_replaced_part(capsys, tmp_path):
    argv = ["train", "--dry-run", "model.kind=text", "rollout.obs_mode=text", f"run_dir={tmp_path / 'r'}"]
    code, out, err = _run_main(argv, capsys)
    assert code == 0, err
    (note,) = [line for line in out.splitlines() if line.startswith("  note ")]
    assert "model.kind=text (override model.kind=text) replaces an earlier choice" in note and "vision_width" in note


@pytest.mark.parametrize(
    "extra, message",
    [
        (["rollout.collector.name=branches"], "algo.name=ppo trains on episode plays only, but "),
        (["algo.skip_zero_advantage=true"], "algo (ppo): algo.skip_zero_advantage drops turns"),
        (["loop.overlap_generation=true"], "loop.overlap_generation=true needs a collector that draws no random"),
    ],
)
def test_a_conflict_names_the_field_before_anything_runs(extra, message, capsys, tmp_path):
    for dry in (["--dry-run"], []):
        argv = ["train", *dry, "--preset", "cpu-maze-loops-plays", "algo.name=ppo", *extra]
        code, out, err = _run_main([*argv, f"run_dir={tmp_path / 'r'}"], capsys)
        assert code == 2 and message in err and "Traceback" not in err
        assert not (tmp_path / "r").exists()


def test_a_config_file_is_read_the_same_way(capsys, tmp_path):
    config = tmp_path / "c.json"
    config.write_text('{"algo": {"name": "ppo"}}')
    code, out, err = _run_main(["train", "--dry-run", "--config", str(config), f"run_dir={tmp_path / 'r'}"], capsys)
    assert code == 2 and "use --preset cpu-maze-loops-plays" in err
    argv = ["train", "--dry-run", "--preset", "cpu-maze-loops-plays", "--config", str(config)]
    code, out, err = _run_main([*argv, f"run_dir={tmp_path / 'r'}"], capsys)
    assert code == 0 and 'algo.name = "ppo"' in out


def test_ppo_trains_on_the_plays_pipeline_with_one_setting(tmp_path):
    """`mazegym train --preset smoke-plays algo.name=ppo`: the default pipeline on episode plays runs to the end."""
    import json

    run = tmp_path / "ppo"
    argv = ["train", "--preset", "smoke-plays", "algo.name=ppo", f"run_dir={run}", "logging.progress=false"]
    out = subprocess.run(
        [sys.executable, "-m", "runners.cli", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert config["algo"]["name"] == "ppo" and config["rollout"]["collector"] == {"name": "plays"}
    results = json.loads((run / "eval_results.json").read_text())
    assert results["rl_steps"] == 2
    if sys.platform != "win32":  # the run records its peak memory and prints it under the table
        assert 0.1 < results["peak_rss_gb"] < 8 and "Peak memory (RSS) of this process" in out.stdout


def test_dry_run_still_rejects_bad_configs(capsys):
    code, out, err = _run_main(["train", "--preset", "qwen3-vl-8b-lora32", "--dry-run", "lora.rank=0"], capsys)
    assert code == 2 and "lora.rank=0 is out of range: it must be >= 1" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "rollout.groupsize=8"], "unknown config key 'rollout.groupsize'"),
        (["train", "rollout.group_size=many"], "expected an integer"),
        (
            ["train", "model.path=/definitely/not/here"],
            "model.path='/definitely/not/here' is not a local model directory",
        ),
        (["train", "--preset", "nope"], "unknown preset 'nope'"),
        (["sft", "sft.mode=both"], "sft.mode='both' is not allowed"),
        (["eval", "maze.eval_set=nope"], "maze.eval_set='nope' does not exist"),
    ],
)
def test_config_errors_exit_2_with_a_fix(argv, message, capsys, tmp_path):
    code, out, err = _run_main(argv + [f"run_dir={tmp_path / 'r'}"], capsys)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_presets_lists_all(capsys):
    code, out, _ = _run_main(["presets"], capsys)
    assert code == 0
    for name in ("cpu-tiny", "cpu-tiny-vlm", "qwen3-vl-8b-lora32"):
        assert name in out
    code, out, _ = _run_main(["presets", "--algo", "grpo"], capsys)
    assert "algo.lr" in out and "algo.norm_by_std" in out


def test_play_solves_a_fixed_maze_with_scripted_keys():
    from mazegym.evalsets import load_eval_set
    from mazegym.solver import oracle_actions

    maze = load_eval_set("heldout-7x7")[0]
    keys = iter({0: "d", 1: "w", 2: "a", 3: "s"}[a] for a in oracle_actions(maze))
    lines = []
    code = manual_control.play(eval_set="heldout-7x7", index=0, input_fn=lambda prompt: next(keys), out=lines.append)
    assert code == 0
    assert any(line.startswith("Solved in") for line in lines)


def test_play_rejects_unknown_keys_and_quits():
    answers = iter(["x", "q"])
    lines = []
    code = manual_control.play(size=7, seed=3, input_fn=lambda prompt: next(answers), out=lines.append)
    assert code == 1
    assert any("Type w (up)" in line for line in lines)


def _without(monkeypatch, *modules: str) -> None:
    """Make ``modules`` unimportable in this process, as on a machine without them."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_submit_without_ray_is_one_line_naming_the_extra(monkeypatch, capsys):
    _without(monkeypatch, "ray", "ray.job_submission")
    code, out, err = _run_main(["submit", "--address", "http://127.0.0.1:8265"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "pip install -e '.[ray]'" in err and "ModuleNotFoundError" not in err


def test_ray_runner_without_ray_is_refused_by_the_dry_run_and_the_run(monkeypatch, capsys, tmp_path):
    _without(monkeypatch, "ray", "ray.job_submission", "runners.distributed.ray_runner")
    argv = ["train", "--preset", "cpu-tiny", "runner.kind=ray", f"run_dir={tmp_path / 'r'}"]
    code, out, err = _run_main([*argv[:1], "--dry-run", *argv[1:]], capsys)
    assert code == 0 and "All checks passed" not in out
    assert "WARNING: runner.kind=ray needs ray, which is not installed here: pip install -e '.[ray]'" in out
    code, out, err = _run_main(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "pip install -e '.[ray]'" in err, err
    assert "ray[default]" not in err


def test_dry_run_names_a_missing_vllm(monkeypatch, capsys, tmp_path):
    _without(monkeypatch, "vllm")
    code, out, err = _run_main(
        ["train", "--dry-run", "--preset", "cpu-tiny", "engine.name=vllm", f"run_dir={tmp_path / 'r'}"], capsys
    )
    assert code == 0 and "engine.name=vllm needs vllm, which is not installed here" in out

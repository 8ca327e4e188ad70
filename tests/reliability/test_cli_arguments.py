"""Ordinary mistakes get one line and exit 2, checked before any work: bad numbers, deeply nested JSON."""

from __future__ import annotations

import pytest

from runners import cli


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--temperature", "-1"],
        ["eval", "--temperature", "nan"],
        ["report", "RUN", "--replays", "-1"],
        ["play", "--seed", "-1"],
    ],
)
def test_negative_or_non_finite_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert "must be a finite number >= 0" in capsys.readouterr().err


def test_deeply_nested_json_in_a_run_dir_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    (run / "eval_results.json").write_text("[" * 100_000 + "]" * 100_000)
    code = cli.main(["report", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err[-500:]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["presets", "--algo", "grop"], "unknown algorithm 'grop'; available: grpo"),
        (["play", "--eval-set", "nosuch"], "unknown eval set 'nosuch'"),
    ],
)
def test_a_mistyped_name_is_reported_as_such_not_as_a_damaged_file(argv, says, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "damaged" not in err and "Traceback" not in err


def test_a_malformed_yaml_config_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("loop:\n  steps: [1,\n")
    assert cli.main(["train", "--config", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: invalid YAML at line 3" in err and "Traceback" not in err


def test_play_at_the_end_of_its_input_says_so(monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["play", "--size", "7"]) == 1
    assert "the input ended (EOF)" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["report", "RUN", "--out"], ["eval", "--json"]])
def test_an_output_file_argument_naming_a_directory_exits_2_before_any_work(command, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command, str(tmp_path)])
    assert exit_info.value.code == 2
    assert "is a directory; name the file" in capsys.readouterr().err


def test_ctrl_c_ends_a_command_with_one_line(tmp_path, monkeypatch, capsys):
    import runners.local

    def interrupted(config, command=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(runners.local, "train", interrupted)
    assert cli.main(["train", "--preset", "smoke", "--run-dir", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["mazegym train: interrupted (Ctrl-C) (rerun the same command to resume from the last checkpoint)"]


def test_version_is_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"mazegym {cli._version()}" and cli._version() != "unknown"


def test_a_dry_run_refuses_a_run_dir_the_run_would_refuse(tmp_path, capsys):
    """A run dir holding an earlier run's checkpoints: --dry-run reports the refusal the real run gives, not 'valid'."""
    from reliability_helpers import write_fake_checkpoint

    run = tmp_path / "run"
    write_fake_checkpoint(run / "checkpoints" / "step_000002")
    argv = ["train", "--preset", "smoke", "--run-dir", str(run), "logging.progress=false"]
    assert cli.main([*argv, "--dry-run"]) == 2
    dry = capsys.readouterr()
    assert cli.main(argv) == 2
    real = capsys.readouterr()
    assert "already holds checkpoints of an earlier run" in dry.err and "Config is valid" not in dry.out
    assert dry.err == real.err

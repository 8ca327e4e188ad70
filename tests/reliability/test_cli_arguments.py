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

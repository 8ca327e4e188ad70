"""Bad settings fail up front with the field named; errors say their type and what to do; the bar is closed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import runners.cli as cli
import runners.train.loop as loop
from runners.config import ConfigError, apply_overrides, validate
from runners.config.presets import get_preset


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ('{"bogus": 1}', "bogus"),
        ('{"cell_px": 2}', "cell_px"),
        ('{"shaping_gamma": 3}', "shaping_gamma"),
        ('{"size": 9}', "size"),
    ],
)
def test_env_kwargs_are_checked_by_validate(kwargs, name):
    config = apply_overrides(get_preset("cpu-tiny"), [f"rollout.env_kwargs={kwargs}"])
    with pytest.raises(ConfigError, match=f"rollout.env_kwargs.*{name}"):
        validate(config)


def test_cli_reports_bad_env_kwargs_before_any_work(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", "--run-dir", str(run), 'rollout.env_kwargs={"bogus": 1}']) == 2
    assert "bogus" in capsys.readouterr().err
    assert not run.exists()


def test_a_key_error_is_explained_not_printed_bare(monkeypatch, capsys):
    def broken(args):
        raise KeyError("optimizer")

    from runners.commands import eval as eval_command

    monkeypatch.setattr(eval_command, "run", broken)
    assert cli.main(["eval"]) == 2
    err = capsys.readouterr().err
    assert "KeyError" in err and "missing key 'optimizer'" in err and "rerun" in err


class _Bar:
    opened: list["_Bar"] = []

    def __init__(self, *args, **kwargs):
        self.closed = False
        _Bar.opened.append(self)

    def update(self, *args, **kwargs):
        pass

    def close(self):
        self.closed = True


class _FailingBackend:
    description = "RL (failing)"

    def generate(self, mazes, step):
        return []

    def update(self, episodes):
        raise RuntimeError("update exploded")


class _Metrics:
    def discard(self, drop):
        return 0


def test_progress_bar_is_closed_when_training_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(loop, "Progress", _Bar)
    config = apply_overrides(get_preset("cpu-tiny"), ["eval.before_rl=false"])
    with pytest.raises(RuntimeError, match="exploded"):
        loop.run_rl_loop(
            config,
            _FailingBackend(),
            iter([SimpleNamespace(size=7)] * 100),  # mazes as the loop reads them: their size alone
            loop.LoopState(),
            tmp_path,
            None,
            _Metrics(),
            lambda m: None,
            None,
            0.0,
        )
    assert _Bar.opened and all(bar.closed for bar in _Bar.opened)

"""docs/extending.md: plugins load from a file or a module, and the page's algorithm and model examples work as
written (loaded with ``--plugin`` as a user would, then trained for a step)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import algos
from algos.data import Episode, Turn
from algos.policies.net import MazeNetPolicy
from runners import cli, models
from runners.config import ConfigError, apply_overrides, validate
from runners.config.presets import get_preset
from runners.registry import PLUGIN_MODULE_PREFIX, load_plugin

ROOT = Path(__file__).resolve().parents[1]


def docs_example(section: str, out: Path) -> Path:
    """The Python block of docs/extending.md's ``## section``, written to ``out`` (a plugin file)."""
    page = (ROOT / "docs" / "extending.md").read_text()
    (code,) = re.findall(rf"## {section}\n.*?```python\n(.*?)```", page, flags=re.S)
    out.write_text(code)
    return out


def test_a_plugin_file_is_imported_once_and_registers_its_parts(tmp_path):
    plugin = tmp_path / "counting_plugin.py"
    plugin.write_text("import random\nTOKEN = random.random()\n")
    first = load_plugin(str(plugin))
    token = first.TOKEN
    again = load_plugin(str(plugin))
    assert again is first and again.TOKEN == token  # not executed a second time
    assert first.__name__ == PLUGIN_MODULE_PREFIX + "counting_plugin" and sys.modules[first.__name__] is first


def test_plugin_names_that_are_neither_a_file_nor_a_module_are_refused(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_plugin(str(tmp_path / "missing.py"))
    with pytest.raises(ValueError, match="neither a .py file nor an importable module"):
        load_plugin("no_such_mazegym_plugin_module")
    bad = tmp_path / "imports_a_missing_module.py"
    bad.write_text("import no_such_dependency_of_a_plugin\n")
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_of_a_plugin"):  # the plugin's own error
        load_plugin(str(bad))
    assert PLUGIN_MODULE_PREFIX + "imports_a_missing_module" not in sys.modules


def test_the_command_line_names_a_bad_plugin_and_a_part_no_plugin_registered(tmp_path, capsys):
    assert cli.main(["train", "--dry-run", "--plugin", str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert "config error: --plugin: plugin file" in err and "does not exist" in err
    assert cli.main(["train", "--preset", "cpu-tiny", f"run_dir={tmp_path / 'r'}", "model.kind=nope"]) == 2
    assert "--plugin FILE.py" in capsys.readouterr().err


@pytest.fixture
def raft(tmp_path):
    """The docs' algorithm class, loaded as a plugin file (once per process)."""
    if "raft" not in algos.available():
        load_plugin(str(docs_example("Add an algorithm", tmp_path / "raft.py")))
    return algos.get("raft")


def _episode(group: int, rewards: list[float]) -> Episode:
    return Episode(turns=[Turn(reward=r, response_ids=[1]) for r in rewards], group_id=group)


def test_the_docs_algorithm_imitates_each_groups_best_plays_only(raft):
    episodes = [
        _episode(0, [0.0, 1.0]),  # return 1: the group's best
        _episode(0, [0.5]),
        _episode(0, [1.0]),  # a tie for the best
        _episode(1, [0.0, 0.0, 0.0]),  # a group that all failed teaches nothing
        _episode(1, [0.0]),
    ]
    algorithm = algos.make("raft", MazeNetPolicy(grid_size=5))
    assert isinstance(algorithm, raft)
    advantages, values = algorithm.compute_advantages(episodes, None)
    assert values is None
    assert advantages.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    algorithm.config.min_return = 1.0  # now even the best play of group 0 is not above it
    assert algorithm.compute_advantages(episodes, None)[0].sum().item() == 0


def test_the_docs_algorithm_is_listed_and_set_from_the_command_line(tmp_path, capsys):
    plugin = docs_example("Add an algorithm", tmp_path / "raft.py")
    assert cli.main(["presets", "--plugin", str(plugin), "--algo", "raft"]) == 0
    assert "algo.min_return = 0.0" in capsys.readouterr().out
    argv = ["train", "--dry-run", "--plugin", str(plugin), "algo.name=raft", "algo.min_return=0.5"]
    assert cli.main([*argv, f"run_dir={tmp_path / 'r'}"]) == 0, capsys.readouterr().err


def _short_run(config, tmp_path: Path, overrides: list[str]) -> None:
    apply_overrides(
        config,
        [
            f"run_dir={tmp_path / 'run'}",
            "eval.every=0",
            "eval.before_rl=false",
            "checkpoint.every=0",
            "logging.progress=false",
            "logging.calibration_seconds=0",
            *overrides,
        ],
    )
    validate(config)


@pytest.mark.slow
def test_the_docs_algorithm_trains_a_step_on_the_smoke_preset(raft, tmp_path):
    from runners.local import train
    from runners.train.metrics import read_jsonl

    config = get_preset("smoke")
    _short_run(config, tmp_path, ["algo.name=raft", "loop.steps=1", "maze.heldout_sets=[]"])
    train(config, log=lambda m: None)
    (record,) = read_jsonl(tmp_path / "run" / "metrics.jsonl", phase="rl")
    assert record["train/num_turns"] > 0 and record["train/optimizer_steps"] > 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["algo"]["name"] == "raft"


@pytest.mark.slow
def test_the_docs_model_builds_sfts_and_trains_a_step(tmp_path):
    from runners.local import train
    from runners.train.metrics import read_jsonl

    if "tiny-llama" not in models.available():
        load_plugin(str(docs_example("Add a model", tmp_path / "tiny_llama.py")))
    config = get_preset("cpu-tiny")
    overrides = ["model.kind=tiny-llama", "sft.steps=3", "sft.batch_size=8", "loop.steps=1", "loop.mazes_per_step=2"]
    _short_run(config, tmp_path, [*overrides, "rollout.group_size=2", "maze.heldout_sets=[]"])
    train(config, log=lambda m: None)
    base = json.loads((tmp_path / "run" / "base_model" / "config.json").read_text())
    assert base["model_type"] == "llama" and base["num_hidden_layers"] == config.model.tiny_layers
    assert (tmp_path / "run" / "sft" / "model").is_dir()
    (record,) = read_jsonl(tmp_path / "run" / "metrics.jsonl", phase="rl")
    assert record["rollout/episodes"] == 4
    with pytest.raises(ConfigError, match="cannot see them"):  # the spec's own check, as for the built-in text LM
        validate(apply_overrides(get_preset("cpu-tiny"), ["model.kind=tiny-llama", "rollout.obs_mode=image"]))

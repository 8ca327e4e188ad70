"""The collector registry: rollout.collector.name chooses a collector and types the section with its settings, the
collector answers what the runners ask, and a collector added in one file (docs/extending.md's example) trains on the
smoke preset."""

import json
import re
from pathlib import Path

import pytest

from runners import config as C
from runners.config.presets import get_preset
from runners.rollout import collectors
from runners.rollout.collect import RolloutConfig

ROOT = Path(__file__).resolve().parents[1]


def test_the_built_in_collectors_and_what_they_answer():
    assert {"plays", "branches"} <= set(collectors.available())
    plays, branches = collectors.get("plays"), collectors.get("branches")
    assert (plays.scheme, plays.sampled, plays.settings) == ("episodes", True, collectors.CollectorConfig)
    assert (branches.scheme, branches.sampled) == ("branching", False)
    rollout = RolloutConfig(history="none", collector=collectors.settings_for("branches", continuation="sampled"))
    assert collectors.of(rollout) is branches and collectors.draws_no_torch_randomness(rollout)
    assert rollout.collector.continuation == "sampled" and branches.check(rollout) == []
    assert not collectors.draws_no_torch_randomness(RolloutConfig())
    with pytest.raises(KeyError, match="available: .*branches"):
        collectors.get("nosuch")


@pytest.mark.parametrize(
    "overrides, name",
    [
        ([], "branches"),  # the preset's scheme file names it
        (["rollout.collector.name=plays", "loop.overlap_generation=false"], "plays"),
        (["rollout.collector.name=plays", "rollout.collector.name=branches"], "branches"),
    ],
)
def test_the_name_chooses_the_collector_and_its_settings(overrides, name):
    config = C.apply_overrides(get_preset("smoke"), overrides)
    assert collectors.of(config.rollout).name == name
    assert type(config.rollout.collector) is collectors.get(name).settings
    C.validate(config, need_model=False)
    again = C.from_dict(json.loads(json.dumps(C.to_dict(config))))  # a saved config.json reads the same
    assert C.to_dict(again) == C.to_dict(config)


def test_a_saved_version_1_config_reads_its_collector_from_either_key():
    saved = json.loads((ROOT / "tests" / "data" / "config_v1" / "smoke.json").read_text())
    assert "collector" in saved["rollout"] and saved["rollout"]["branching"] is True
    del saved["rollout"]["collector"]  # saved before the collector key existed
    config = C.from_dict(saved)
    assert collectors.of(config.rollout).name == "branches" and config.rollout.collector.samples == 32
    saved["rollout"]["branching"] = False
    assert type(C.from_dict(saved).rollout.collector) is collectors.CollectorConfig


def test_unknown_collectors_and_a_collectors_own_rules_fail_validation():
    with pytest.raises(C.ConfigError, match="rollout.collector.name='nosuch' is not a registered collector"):
        C.apply_overrides(get_preset("smoke"), ["rollout.collector.name=nosuch"])
    with pytest.raises(C.ConfigError, match=r"rollout.collector.gamma=0.0 is out of range: it must be > 0"):
        C.validate(C.apply_overrides(get_preset("smoke"), ["rollout.collector.gamma=0"]), need_model=False)
    with pytest.raises(C.ConfigError, match="rollout.collector.worlds adds greedy-style continuations"):
        C.validate(C.apply_overrides(get_preset("smoke"), ["rollout.collector.worlds=2"]), need_model=False)


def test_resuming_a_version_1_checkpoint_is_not_a_change_but_another_collector_is(tmp_path):
    from runners.build import refuse_changed_recipe

    config = get_preset("smoke")
    saved = json.loads((ROOT / "tests" / "data" / "config_v1" / "smoke.json").read_text())
    (tmp_path / "state.json").write_text(json.dumps({"config": saved}))
    refuse_changed_recipe(config, tmp_path)
    changed = C.apply_overrides(get_preset("smoke"), ["rollout.collector.name=plays"])
    with pytest.raises(C.ConfigError, match="rollout.collector.name: 'branches' -> 'plays'"):
        refuse_changed_recipe(changed, tmp_path)


def _register_the_docs_example() -> None:
    """Run the collector of docs/extending.md (it registers ``random-starts``), once per process."""
    if "random-starts" in collectors.available():
        return
    page = (ROOT / "docs" / "extending.md").read_text()
    (code,) = re.findall(r"## Add a collector.*?```python\n(.*?)```", page, flags=re.S)
    exec(compile(code, "docs/extending.md", "exec"), {"__name__": "random_starts"})


@pytest.mark.slow
def test_the_docs_example_collector_trains_on_the_smoke_preset(tmp_path):
    from runners.local import train
    from runners.train.metrics import read_jsonl

    _register_the_docs_example()
    config = C.apply_overrides(get_preset("smoke"), ["rollout.collector.name=random-starts"])
    assert config.rollout.collector.fraction == 1.0  # its own setting, at its default
    with pytest.raises(C.ConfigError, match="set loop.overlap_generation=false"):  # its plays draw from torch
        C.validate(config)
    C.apply_overrides(
        config,
        [
            f"run_dir={tmp_path / 'run'}",
            "loop.steps=1",
            "eval.every=0",
            "eval.before_rl=false",
            "checkpoint.every=0",
            "logging.progress=false",
            "logging.calibration_seconds=0",
            "loop.overlap_generation=false",
            "rollout.collector.fraction=0.5",
        ],
    )
    C.validate(config)
    train(config, log=lambda m: None)
    (record,) = read_jsonl(tmp_path / "run" / "metrics.jsonl", phase="rl")
    assert record["rollout/episodes"] == config.loop.mazes_per_step * config.rollout.group_size
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["rollout"]["collector"]
    assert saved == {"name": "random-starts", "fraction": 0.5}


def test_the_docs_example_collectors_setting_is_checked_and_listed():
    from runners.config.help import render_keys

    _register_the_docs_example()
    with pytest.raises(
        C.ConfigError, match=r"rollout.collector.fraction=2.0 is out of range: it must be >= 0 and <= 1"
    ):
        C.validate(
            C.apply_overrides(
                get_preset("cpu-tiny"), ["rollout.collector.name=random-starts", "rollout.collector.fraction=2"]
            )
        )
    text = render_keys(C.apply_overrides(get_preset("cpu-tiny"), ["rollout.collector.name=random-starts"]))
    assert "[rollout.collector: random-starts" in text and "rollout.collector.fraction = 1.0" in text

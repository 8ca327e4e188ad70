"""The collector registry: rollout.collector and rollout.branching select the same collectors, the collector answers
what the runners ask, and a collector added in one file (docs/extending.md's example) trains on the smoke preset."""

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
    assert (plays.scheme, plays.sampled) == ("episodes", True)
    assert (branches.scheme, branches.sampled) == ("branching", False)
    rollout = RolloutConfig(history="none", branching=True, branch_continuation="sampled")
    assert collectors.of(rollout) is branches and collectors.draws_no_torch_randomness(rollout)
    assert not collectors.draws_no_torch_randomness(RolloutConfig())
    assert collectors.get("branches").settings(rollout).continuation == "sampled"
    with pytest.raises(KeyError, match="available: .*branches"):
        collectors.get("nosuch")


@pytest.mark.parametrize(
    "overrides, name, branching",
    [
        ([], "branches", True),  # the preset's rollout.branching=true
        (["rollout.branching=false"], "plays", False),
        (["rollout.collector=plays"], "plays", False),
        (["rollout.branching=false", "rollout.collector=branches"], "branches", True),
        (["rollout.collector=plays", "rollout.branching=true"], "branches", True),
    ],
)
def test_collector_and_branching_select_the_same_collectors(overrides, name, branching):
    config = C.apply_overrides(get_preset("smoke"), overrides)
    assert collectors.of(config.rollout).name == name and config.rollout.branching is branching
    again = C.from_dict(json.loads(json.dumps(C.to_dict(config))))  # a saved config.json reads the same
    assert C.to_dict(again) == C.to_dict(config)


def test_a_saved_config_from_before_the_collector_key_reads_the_same():
    saved = C.to_dict(get_preset("smoke"))
    del saved["rollout"]["collector"]
    assert collectors.of(C.from_dict(saved).rollout).name == "branches"
    saved["rollout"]["branching"] = False
    assert collectors.of(C.from_dict(saved).rollout).name == "plays"
    assert collectors.name_of(saved["rollout"]) == "plays"  # a config.json mapping, as the report reads it


def test_unknown_and_contradicting_collectors_fail_validation():
    with pytest.raises(C.ConfigError, match="rollout.collector='nosuch' is not registered; choose one of"):
        C.validate(C.apply_overrides(get_preset("smoke"), ["rollout.collector=nosuch"]), need_model=False)
    with pytest.raises(ValueError, match="rollout.branching=true selects the branches collector"):
        collectors.of(RolloutConfig(branching=True, collector="plays"))
    with pytest.raises(C.ConfigError, match=r"rollout: branch_gamma must be in \(0, 1\]"):  # the collector's check
        C.validate(C.apply_overrides(get_preset("smoke"), ["rollout.branch_gamma=0"]), need_model=False)


def test_resuming_a_checkpoint_from_before_the_collector_key_is_not_a_change(tmp_path):
    from runners.build import refuse_changed_recipe

    config = get_preset("smoke")
    saved = C.to_dict(config)
    del saved["rollout"]["collector"]
    (tmp_path / "state.json").write_text(json.dumps({"config": saved}))
    refuse_changed_recipe(config, tmp_path)
    changed = C.apply_overrides(get_preset("smoke"), ["rollout.collector=plays"])
    with pytest.raises(C.ConfigError, match="rollout.branching: True -> False"):
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
    from runners.config import resolve_scheme, scheme_of
    from runners.local import train
    from runners.train.metrics import read_jsonl

    _register_the_docs_example()
    overrides = ["rollout.collector=random-starts"]
    config = get_preset("smoke")
    base = scheme_of(config)
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
            *overrides,
        ],
    )
    note = resolve_scheme(config, base, C.override_keys(overrides))
    assert note and "loop.overlap_generation=false" in note and not config.rollout.branching
    C.validate(config)
    train(config, log=lambda m: None)
    (record,) = read_jsonl(tmp_path / "run" / "metrics.jsonl", phase="rl")
    assert record["rollout/episodes"] == config.loop.mazes_per_step * config.rollout.group_size
    assert json.loads((tmp_path / "run" / "config.json").read_text())["rollout"]["collector"] == "random-starts"

"""Foreign checkpoints and rewinds: a run resumes only its own checkpoints, and after a rewind the marker decides."""

import json
from pathlib import Path

import pytest

from runners.build import open_run
from runners.config import apply_overrides
from runners.config.presets import get_preset
from runners.train.checkpoint import LATEST, REQUIRED_FILES, CheckpointManager


def _writer(payload: str):
    def write(tmp: Path) -> None:
        for rel in REQUIRED_FILES:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(json.dumps({"payload": payload}))

    return write


def _payload(path: Path) -> str:
    return json.loads((path / "state.json").read_text())["payload"]


def _quiet(root: Path) -> CheckpointManager:
    return CheckpointManager(root, keep=5, log=lambda m: None)


def test_resuming_another_runs_checkpoint_is_refused_before_the_run_dir_changes(tmp_path):
    other = _quiet(tmp_path / "other" / "checkpoints")
    foreign = other.save(1, _writer("other run"))
    run = tmp_path / "mine"
    mine = _quiet(run / "checkpoints")
    mine.save(1, _writer("step 1"))
    mine.save(2, _writer("step 2"))
    (run / "metrics.jsonl").write_text('{"step": 2, "phase": "rl"}\n')
    (run / "config.json").write_text("{}")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    config = apply_overrides(get_preset("cpu-tiny"), [f"run_dir={run}", f"checkpoint.resume={foreign}"])
    with pytest.raises(ValueError, match="not a checkpoint of this run dir"):
        open_run(config, log=lambda m: None)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_after_a_rewind_and_a_crash_latest_resumes_the_new_line_not_the_abandoned_one(tmp_path):
    root = tmp_path / "checkpoints"
    first = _quiet(root)
    for step in (1, 2, 3):
        first.save(step, _writer(f"old {step}"))
    rewound = _quiet(root)
    start = rewound.start_run(str(root / "step_000001"))
    rewound.continue_from(start)  # what open_run does once the resume passed its checks
    rewound.save(2, _writer("new 2"))  # then the process dies before step 3
    messages: list[str] = []
    again = CheckpointManager(root, keep=5, log=messages.append)
    picked = again.start_run("latest")
    assert picked.name == "step_000002" and _payload(picked) == "new 2"
    assert any("step_000003" in m and "rewind" in m for m in messages)


def test_a_save_that_crashed_before_its_marker_is_still_resumed(tmp_path):
    root = tmp_path / "checkpoints"
    manager = _quiet(root)
    manager.save(1, _writer("1"))
    manager.save(2, _writer("2"))
    marker = (root / LATEST).read_text()
    manager.save(3, _writer("3"))
    (root / LATEST).write_text(marker)  # step 3 renamed into place, marker not yet replaced
    assert _quiet(root).start_run("latest").name == "step_000003"


def test_a_rewound_run_keeps_saving_and_resuming_on_its_own_line(tmp_path):
    root = tmp_path / "checkpoints"
    first = _quiet(root)
    for step in (1, 2, 3, 4):
        first.save(step, _writer(f"old {step}"))
    rewound = _quiet(root)
    rewound.continue_from(rewound.start_run(str(root / "step_000002")))
    rewound.save(3, _writer("new 3"))
    assert _quiet(root).start_run("latest").name == "step_000003"
    assert _payload(root / "step_000003") == "new 3"

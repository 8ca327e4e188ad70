"""Strings read from a run directory never become markup in ``report.html``: hostile values are escaped."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_report import make_run  # noqa: E402

from runners.artifacts.report import write_report  # noqa: E402

SCRIPT = "<script>document.title='pwned'</script>"
IMG = '<img src=x onerror="document.title=1">'


def _poison(run: Path) -> None:
    """Hostile values where a run dir holds numbers: eval results, per-maze records, summaries, held-out rows."""
    for path in sorted((run / "eval").glob("*.json")):
        data = json.loads(path.read_text())
        data["summary"]["solved"] = IMG
        data["summary"]["solve_rate"] = SCRIPT
        for rec in data["mazes"]:
            rec["moves"], rec["optimal_moves"], rec["maze_id"] = IMG, SCRIPT, IMG
            rec["invalid"] = SCRIPT
        path.write_text(json.dumps(data))
    (run / "eval_results.json").write_text(
        json.dumps(
            {
                "eval_set": "heldout-7x7",
                "before_rl": {"solve_rate": 0.25, "solved": IMG, "episodes": SCRIPT},
                "after_rl": {"solve_rate": 0.5, "solved": 32, "episodes": 64},
                "rl_steps": SCRIPT,
                "seconds": 1.0,
                "stopped_by_time_cap": {"step": SCRIPT, "planned": IMG, "minutes": SCRIPT},
                "timing": {"rl_steps": IMG, "rl_steps_per_s": 0.5, "phase_mean_seconds": {IMG: 1.0}},
            }
        )
    )


def test_hostile_run_strings_are_escaped(tmp_path):
    run = make_run(tmp_path / "run")
    _poison(run)
    page = write_report(run).read_text()
    assert "pwned" in page  # the hostile text is shown, as text...
    assert not re.search(r"<script", page, re.I), "a <script> tag from the run dir reached the page"
    assert not re.search(r"<img[^>]*onerror", page, re.I), "an event-handler attribute reached the page"
    assert "&lt;script&gt;" in page and "onerror=&quot;" in page  # ...escaped
    # and were one ever missed, the page's policy lets no script run and nothing load
    head = page[: page.index("<title>")]
    assert "Content-Security-Policy" in head and "default-src 'none'" in head and "script-src" not in head


def test_a_records_file_whose_step_is_not_a_number_is_skipped(tmp_path):
    from runners.rollout.evaluate import list_eval_records

    run = make_run(tmp_path / "run")
    first = sorted((run / "eval").glob("*.json"))[0]
    data = json.loads(first.read_text())
    data["step"] = SCRIPT
    first.write_text(json.dumps(data))
    assert [d["step"] for d in list_eval_records(run)] == [4]
    assert "pwned" not in write_report(run).read_text()


def _set(path: Path, key: str, value) -> None:
    data = json.loads(path.read_text())
    data[key] = value
    path.write_text(json.dumps(data))


DAMAGE = {
    "eval_results.json is a string": lambda run: (run / "eval_results.json").write_text('"x"'),
    "after_rl is a string": lambda run: (run / "eval_results.json").write_text('{"after_rl": "x", "before_rl": []}'),
    "invocations is a number": lambda run: _set(run / "run_info.json", "invocations", 3),
    "an invocation is a number": lambda run: _set(run / "run_info.json", "invocations", [1]),
    "a summary is a list": lambda run: [_set(p, "summary", [1]) for p in (run / "eval").glob("*.json")],
    "a maze record is a number": lambda run: [_set(p, "mazes", [1]) for p in (run / "eval").glob("*.json")],
    "actions are letters": lambda run: [
        _set(p, "mazes", [{"index": 0, "success": True, "actions": "zz"}]) for p in (run / "eval").glob("*.json")
    ],
    "an action outside the env": lambda run: [
        _set(p, "mazes", [{"index": 0, "success": False, "actions": [9]}]) for p in (run / "eval").glob("*.json")
    ],
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_run_file_never_makes_a_traceback(tmp_path, damage, capsys):
    """Values of the wrong type in a run's files are left out of the page (and said so), never a crash."""
    from runners.cli import main

    run = make_run(tmp_path / "run")
    DAMAGE[damage](run)
    assert main(["report", str(run), "--replays", "1"]) == 0, capsys.readouterr().err
    assert (run / "report.html").is_file()

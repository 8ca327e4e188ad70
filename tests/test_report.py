"""Per-maze eval records and `mazegym report`: records round-trip and replay, the report renders in a browser.

The end-to-end test builds a small synthetic run dir with the same writers a training run uses
(MetricsLogger, write_eval_records, record_invocation, config.json), runs `mazegym report` on it,
and loads the HTML in headless Chromium: no console errors, every image decoded (naturalWidth > 0).
"""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace
from pathlib import Path

import numpy as np
import pytest

from algos.data import Episode, Turn
from mazegym.evalsets import EVAL_SETS, load_eval_set
from mazegym.recording import OUTCOME_RGB, maze_grid, maze_thumbnail
from mazegym.solver import shortest_path_actions
from report_helpers import NO_CHROMIUM, assert_renders_in_chromium, chromium
from runners import cli
from runners.rollout.evaluate import (
    discard_eval_records,
    eval_summary,
    list_eval_records,
    maze_records,
    read_eval_records,
    records_path,
    replay_record,
    strip_records,
    write_eval_records,
)
from runners.rollout.collect import RolloutConfig

SET = "heldout-7x7"


def _episode(spec, solved: bool, invalid_texts=("no idea", "<action>jump</action>")) -> Episode:
    """An episode as a rollout records it: the shortest path when solved; else invalid replies, then back and forth
    between the start and the cell away from the goal (never reaching it)."""
    path = shortest_path_actions(spec.grid, spec.start, spec.goal)
    if solved:
        turns = [Turn(action=a, valid=True, text=f"<action>{a}</action>") for a in path]
    else:
        turns = [Turn(action=None, valid=False, text=t) for t in invalid_texts]
        away = [(path[0] + 2) % 4, path[0]]
        turns += [
            Turn(action=away[i % 2], valid=True, text="move") for i in range(EVAL_SETS[SET].max_moves - len(turns))
        ]
    optimal = len(path)
    return Episode(turns=turns, maze_id=spec.maze_id, success=solved, optimal_moves=optimal, info={"size": spec.size})


def _summary(solved_indices: set[int]) -> dict:
    mazes = load_eval_set(SET)
    episodes = [_episode(m, i in solved_indices) for i, m in enumerate(mazes)]
    return eval_summary(SET, episodes, RolloutConfig(max_moves=EVAL_SETS[SET].max_moves))


# --------------------------------------------------------------------------- records
def test_maze_records_keep_outcome_actions_and_a_few_invalid_replies():
    spec = load_eval_set(SET)[5]
    texts = ("a", "b" * 1000, "c", "d")
    records = maze_records([_episode(spec, False, texts), _episode(spec, True)], load_eval_set(SET))
    failed, solved = records
    assert failed["index"] == 5 and failed["maze_id"] == spec.maze_id and failed["success"] is False
    assert failed["moves"] == EVAL_SETS[SET].max_moves and failed["actions"][:4] == [None] * 4
    assert failed["invalid"] == 4 and len(failed["invalid_samples"]) == 3 and len(failed["invalid_samples"][1]) == 300
    assert solved["success"] is True and solved["moves"] == solved["optimal_moves"] == len(solved["actions"])
    assert maze_records([_episode(spec, True)])[0]["index"] is None, "a maze outside the given set has no index"
    json.dumps(records)  # JSON-ready


def test_records_file_round_trip_list_and_discard(tmp_path):
    summary = _summary({0, 3})
    assert {"mazes", "env"} <= set(summary) and not {"mazes", "env"} & set(strip_records(summary))
    path = write_eval_records(tmp_path, 4, summary, "rl")
    assert path == records_path(tmp_path, 4, SET) == tmp_path / "eval" / f"step_4_{SET}.json"
    data = read_eval_records(path)
    assert data["step"] == 4 and data["set"] == SET and data["label"] == "rl" and data["format"] == 1
    assert data["summary"]["solved"] == 2 and "mazes" not in data["summary"]
    assert data["env"] == {"max_moves": EVAL_SETS[SET].max_moves, "require_stop": False, "env_kwargs": {}}
    assert [m["index"] for m in data["mazes"]] == list(range(64))
    write_eval_records(tmp_path, 0, _summary(set()), "before_rl")
    write_eval_records(tmp_path, 12, summary, "rl")
    (tmp_path / "eval" / "step_99_broken.json").write_text("{not json")
    steps = [d["step"] for d in list_eval_records(tmp_path)]
    assert steps == [0, 4, 12], "numeric step order; unreadable files skipped"
    assert discard_eval_records(tmp_path, 4) == 1 and [d["step"] for d in list_eval_records(tmp_path)] == [0, 4]
    with pytest.raises(ValueError, match="eval records file"):
        read_eval_records(tmp_path / "eval" / "step_99_broken.json")
    assert not list((tmp_path / "eval").glob(".*.tmp")), "written atomically: no temporary files left"


def test_a_record_replays_to_the_recorded_outcome_without_the_model(tmp_path):
    data = read_eval_records(write_eval_records(tmp_path, 1, _summary({2}), "rl"))
    specs = load_eval_set(SET)
    for rec in data["mazes"][:4]:
        result = replay_record(rec, data["env"], specs[rec["index"]])
        assert result.success == rec["success"] and result.actions_used == rec["moves"]
        assert len(result.frames) == rec["moves"] + 1


def test_thumbnails_are_framed_by_outcome():
    spec = load_eval_set(SET)[0]
    for outcome in (True, False, None):
        thumb = maze_thumbnail(spec, outcome, cell_px=4, border=2)
        assert thumb.shape == (7 * 4 + 4, 7 * 4 + 4, 3) and tuple(thumb[0, 0]) == OUTCOME_RGB[outcome]
    sheet = maze_grid(load_eval_set(SET)[:10], [True] * 10, columns=4, cell_px=4, border=2, gap=1)
    assert sheet.shape == (3 * 33 + 1, 4 * 33 + 1, 3) and sheet.dtype == np.uint8
    with pytest.raises(ValueError):
        maze_grid(load_eval_set(SET)[:2], [True])


# --------------------------------------------------------------------------- report
def make_run(run: Path, evals: bool = True, metrics: bool = True, overrides: tuple[str, ...] = ()) -> Path:
    """A run dir written by the same functions a training run uses (config: cpu-tiny with ``overrides``)."""
    from runners.config import apply_overrides, to_dict
    from runners.train.metrics import MetricsLogger
    from runners.config.presets import get_preset
    from runners.train.run_info import record_invocation

    cfg = apply_overrides(get_preset("cpu-tiny"), list(overrides))
    cfg.run_dir = str(run)
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(to_dict(cfg)))
    record_invocation(run, "mazegym train --run-dir " + str(run))
    if metrics:
        logger = MetricsLogger(run, tensorboard=False, echo=lambda m: None)
        for step in range(1, 9):  # a first-step spike, as MazeVLM's vision pretraining logs
            logger.log(
                step,
                {"vision_loss": 14000.0 if step == 1 else 2.0 / step, "vision_move_accuracy": 0.1 * step},
                phase="vision",
            )
        for step in range(1, 6):
            logger.log(step, {"loss": 3.0 / step, "grad_norm": 1.0}, phase="sft")
        logger.log(0, {"eval/solve_rate": 0.25, "time/eval": 4.0}, phase="eval")
        for step in range(1, 5):
            logger.log(
                step,
                {
                    "rollout/success_rate": 0.2 + 0.05 * step,
                    "train/return_mean": 0.1 * step,
                    "rollout/spl": 0.0,
                    "train/approx_kl": 0.01,
                    "train/entropy": float("nan"),
                    "train/clip_frac": 0.1,
                    "time/generate": 2.0,
                    "time/update": 1.0,
                    "time/sync": 0.1,
                    **({"eval/solve_rate": 0.4} if step % 2 == 0 else {}),
                },
                phase="rl",
            )
        logger.close()
    if evals:
        write_eval_records(run, 0, _summary(set(range(16))), "before_rl")
        write_eval_records(run, 4, _summary(set(range(8, 34))), "rl")
    return run


def _report(argv, capsys):
    code = cli.main(["report", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_report_is_one_self_contained_html_file(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    out = tmp_path / "r.html"
    code, stdout, err = _report([str(run), "--out", str(out), "--replays", "2"], capsys)
    assert code == 0, err
    page = out.read_text()
    assert str(out) in stdout
    urls = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert urls and all(u.startswith("data:image/") for u in urls), "every image embedded, nothing fetched"
    assert "<script" not in page.lower()
    assert page.count('src="data:image/gif;base64,') == 4, "2 solved + 2 failed replays"
    assert page.count('alt="maze ') == 128, "64 thumbnails before and 64 after"
    assert "Before RL: step 0" in page and "After RL: step 4" in page and "26/64; 95% interval 29.5-52.9%" in page
    assert "Newly solved: #16, #17" in page and "Newly failed: #0, #1" in page
    assert "mazegym train --run-dir" in page and "transformers" in page and "Success: training episodes" in page
    assert "(empty reply)" not in page and "no idea" in page, "invalid reply samples shown, escaped"


def test_report_draws_the_think_longer_curve_when_the_run_holds_an_extrapolation_record(tmp_path, capsys):
    run = make_run(tmp_path / "run", evals=False)
    code, _, err = _report([str(run)], capsys)
    assert code == 0, err
    assert "think longer" not in (run / "report.html").read_text().lower()
    row = {"10": {"solve_rate": 0.0}, "20": {"solve_rate": 0.5}, "40": {"solve_rate": 0.75}}
    record = {
        "trained_size": 9,
        "trained_iterations": 20,
        "first": 16,
        "sizes": {"VisMaze-v0": 9, "heldout-13x13": 13},
        "sweep": {"VisMaze-v0": row, "heldout-13x13": row},
    }
    (run / "extrapolation.json").write_text(json.dumps(record))
    code, _, err = _report([str(run)], capsys)
    page = (run / "report.html").read_text()
    assert code == 0, err
    assert "Other maze sizes: think longer, solve bigger" in page and "first 16 mazes" in page
    assert 'alt="solve rate against encoder iterations per maze size" src="data:image/png;base64,' in page
    (run / "extrapolation.json").write_text(json.dumps({"sweep": {}}))
    code, _, err = _report([str(run)], capsys)
    assert code == 0 and "holds no iterations sweep" in (run / "report.html").read_text()


def test_report_says_what_is_missing_and_refuses_a_dir_without_a_run(tmp_path, capsys):
    bare = make_run(tmp_path / "bare", evals=False, metrics=False)
    code, stdout, err = _report([str(bare)], capsys)
    page = (bare / "report.html").read_text()
    assert code == 0 and "no metrics" in page and "no per-maze eval records" in page and "no eval_results.json" in page
    (tmp_path / "empty").mkdir()
    code, stdout, err = _report([str(tmp_path / "empty")], capsys)
    assert code == 2 and "holds no mazegym run" in err and "Traceback" not in err
    assert not (tmp_path / "empty" / "report.html").exists()


def _charts(page: str) -> dict[str, tuple[str, str]]:
    """heading -> (caption, image alt text) of every learning-curve chart on a report page."""
    found = re.findall(r'<div class="chart"><h3>(.*?)</h3>(?:<p class="caption">(.*?)</p>)?<img alt="(.*?)"', page)
    return {heading: (caption, alt) for heading, caption, alt in found}


def test_report_charts_have_human_titles_y_labels_and_a_log_axis_for_a_spiking_loss(tmp_path, capsys):
    from runners.artifacts.report import _figure, chart_plan, load_run

    run = make_run(tmp_path / "run")
    assert _report([str(run)], capsys)[0] == 0
    charts = _charts((run / "report.html").read_text())
    assert {"Vision pretraining", "Supervised fine-tuning (SFT)", "Seconds per RL step, by phase"} <= set(charts)
    assert "Vision pretraining loss (y: loss, log scale)" in charts["Vision pretraining"][1]
    assert "on a log y-axis" in charts["Vision pretraining"][0]
    assert "Policy entropy" not in charts["Policy: KL, entropy, clipping"][1], "an all-NaN metric has no panel"
    assert "Share of tokens clipped by PPO (y: clipped fraction)" in charts["Policy: KL, entropy, clipping"][1]
    data = load_run(run)
    for chart in chart_plan(data.metrics, data.config):
        for ax, panel in zip(_figure(chart).axes, chart.panels):
            assert ax.get_title() == panel.title and "/" not in ax.get_title(), "a title, not a metric key"
            assert ax.get_ylabel() and ax.get_xlabel()
            assert ax.get_yscale() == ("log" if panel.log else "linear")
    vision = next(c for c in chart_plan(data.metrics, data.config) if c.heading == "Vision pretraining")
    assert [p.log for p in vision.panels] == [True, False], "the loss on a log axis, the accuracy on 0..1"


def test_report_explains_the_training_success_and_leaves_out_what_the_recipe_lacks(tmp_path, capsys):
    plain = make_run(tmp_path / "plain", evals=False, overrides=("loop.parity_every=5",))
    assert _report([str(plain)], capsys)[0] == 0
    charts = _charts((plain / "report.html").read_text())
    success = charts["Success: training episodes and the fixed eval set"][0]
    assert "sampled plays (temperature 0.7, 8 per maze)" in success and "greedy play (temperature 0)" in success
    assert "SPL of the training rollouts" in charts["Return and reward spread"][1]
    assert "every 5 steps, runs the parity probe" in charts["Seconds per RL step, by phase"][0]

    branching = make_run(tmp_path / "branching", evals=False, overrides=("rollout.collector.name=branches",))
    assert _report([str(branching)], capsys)[0] == 0
    page = (branching / "report.html").read_text()
    charts = _charts(page)
    assert "one-move branches" in charts["Success: training episodes and the fixed eval set"][0]
    assert "SPL of the training rollouts" not in page, "no flat-zero SPL panel on a branching run"
    assert "SPL is left out" in charts["Return and reward spread"][0]
    assert "parity" not in page.split("<h2>Run details</h2>")[0], "no parity caption when the probe is off"


def test_report_grids_are_titled_and_carry_a_colour_legend(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    assert _report([str(run)], capsys)[0] == 0
    page = (run / "report.html").read_text()
    legend = '<div class="legend">Frame colour:<span class="swatch" style="background:rgb{}"></span>solved'
    assert page.count(legend.format(OUTCOME_RGB[True])) == 2, "one legend over each grid"
    assert page.count(f'rgb{OUTCOME_RGB[False]}"></span>failed') == 2
    assert "not played" not in page.split("Replays of the agent")[0].split("Before RL")[1]


# --------------------------------------------------------------------------- pictures outside the report
def test_the_tensorboard_eval_grid_is_titled_over_a_legend():
    from mazegym.recording import labelled_grid, maze_grid, outcome_legend, titled

    specs = load_eval_set("VisMaze-v0")[:8]
    outcomes = [True, False] * 4
    bare = maze_grid(specs, outcomes)
    image = labelled_grid(specs, outcomes, "VisMaze-v0 at step 4: 4/8 solved")
    heading = titled(bare, "VisMaze-v0 at step 4: 4/8 solved").shape[0] - bare.shape[0]
    legend = outcome_legend((True, False), width=image.shape[1])
    assert image.shape[0] == bare.shape[0] + heading + legend.shape[0] and image.shape[1] >= bare.shape[1]
    np.testing.assert_array_equal(image[-legend.shape[0] :], legend)
    assert heading > 0 and image.dtype == np.uint8


def test_before_after_grids_are_titled_over_a_legend():
    from mazegym.recording import before_after_grids, outcome_legend, titled

    specs = load_eval_set(SET)[:16]
    before, after = [i < 4 for i in range(16)], [i < 12 for i in range(16)]
    plain = maze_grid(specs, before)
    picture = before_after_grids(specs, before, after)
    assert picture.shape[0] > plain.shape[0] + 20 and picture.shape[1] > 2 * plain.shape[1]
    title = titled(plain, "before RL")
    strip = title[: title.shape[0] - plain.shape[0]]
    assert (strip < 128).any(), "the title is drawn in black above the grid"
    assert (title[strip.shape[0] :] == plain).all()
    assert (picture[: strip.shape[0]] < 128).any(), "both sheets have their title strip"

    def swatch_pixels(image, outcome):  # the legend's swatch of that colour (anti-aliased text makes only a few)
        legend = image[-outcome_legend().shape[0] :]
        return int((legend == np.array(OUTCOME_RGB[outcome], np.uint8)).all(axis=-1).sum())

    assert swatch_pixels(picture, True) >= 100 and swatch_pixels(picture, False) >= 100
    assert swatch_pixels(picture, None) < 20, "no 'not played' entry when every maze was played"
    assert swatch_pixels(before_after_grids(specs, [None] * 16, after), None) >= 100
    wide = titled(np.zeros((10, 10, 3), np.uint8), "a title far wider than the picture")
    assert wide.shape[1] > 10 and titled(plain, "x").shape == titled(plain, "another").shape


def test_readme_pictures_titles_both_grids(tmp_path, monkeypatch):
    import runpy
    import sys

    run = make_run(tmp_path / "run", metrics=False)
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "readme_pictures.py"
    monkeypatch.setattr(sys, "argv", ["readme_pictures.py", str(run), "--set", SET, "--out", str(tmp_path / "out")])
    runpy.run_path(str(script), run_name="__main__")
    from PIL import Image

    grids = np.asarray(Image.open(tmp_path / "out" / "main_job_grids.png").convert("RGB"))
    plain = maze_grid(load_eval_set(SET), [True] * 64)
    assert grids.shape[0] > plain.shape[0] + 20, "a title strip above and a legend under the grids"
    assert (grids[:10] < 128).any() and (tmp_path / "out" / "main_job_agent.gif").is_file()


# --------------------------------------------------------------------------- browser
@pytest.mark.skipif(chromium() is None, reason=NO_CHROMIUM)
def test_report_renders_in_headless_chromium_with_every_image_loaded(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    assert _report([str(run)], capsys)[0] == 0
    assert_renders_in_chromium(run / "report.html", tmp_path)


# --------------------------------------------------------------------------- the training loop writes them
class _Backend:
    """A step backend with no model: every evaluation solves the first ``4 * step`` mazes."""

    description = "RL (fake)"

    def __init__(self):
        self.step = 0

    def generate(self, mazes, step):
        self.step = step
        return []

    def update(self, episodes):
        return {"loss": 1.0}

    def sync(self, step, check_parity):
        return {}

    def evaluate(self, set_name):
        return _summary(set(range(4 * self.step))) if set_name == SET else {**_summary(set()), "set": set_name}

    def checkpoint(self, step, stream_state, extra):
        json.dumps(extra)  # what a checkpoint keeps is JSON, without the per-maze records
        assert "mazes" not in (extra["before"] or {})

    def save_adapter(self, directory):
        (directory / "adapter_model.safetensors").write_bytes(b"x")

    def step_extras(self, *args):
        return {}

    def results_extras(self):
        return {}, {}


def test_the_loop_writes_records_per_eval_and_one_tensorboard_tag_per_quantity(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from runners.train.checkpoint import CheckpointManager
    from runners.config import apply_overrides
    from runners.train.loop import LoopState, run_rl_loop
    from runners.train.metrics import MetricsLogger
    from runners.config.presets import get_preset

    class Stream:
        def __next__(self):  # a maze as the loop reads it: its size alone
            return SimpleNamespace(size=9)

        def state_dict(self):
            return {}

    config = apply_overrides(
        get_preset("cpu-tiny"),
        [
            "loop.steps=4",
            "eval.every=2",
            "logging.progress=false",
            "loop.mazes_per_step=1",
            f"maze.eval_set={SET}",
            "maze.heldout_sets=heldout-13x13",
            "checkpoint.every=0",
        ],
    )
    (tmp_path / "eval").mkdir()
    write_eval_records(tmp_path, 7, _summary(set()), "rl")  # left by an earlier, longer attempt: a fresh start drops it
    metrics = MetricsLogger(tmp_path, echo=lambda m: None)
    try:
        result = run_rl_loop(
            config,
            _Backend(),
            Stream(),
            LoopState(),
            tmp_path,
            CheckpointManager(tmp_path / "c"),
            metrics,
            lambda m: None,
            None,
            0.0,
        )
    finally:
        metrics.close()
    assert [(d["step"], d["set"], d["label"]) for d in list_eval_records(tmp_path)] == [
        (0, SET, "before_rl"),
        (2, SET, "rl"),
        (4, "heldout-13x13", "heldout"),
        (4, SET, "rl"),
    ]
    assert result.after["solved"] == 16 and "mazes" not in result.after
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert "mazes" not in results["before_rl"] and "mazes" not in results["heldout"]["heldout-13x13"]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(s.step, s.value) for s in events.Scalars("eval/solve_rate")] == [(0, 0.0), (2, 0.125), (4, 0.25)]
    assert [i.step for i in events.Images("eval/mazes")] == [0, 2, 4]
    assert not [t for t in events.Tags()["scalars"] if t.startswith(("rl/eval", "eval/eval"))]
    assert [s.value for s in events.Scalars("hparam/eval_solve_rate_after")] == [0.25], "hparams with final metrics"
    code = cli.main(["report", str(tmp_path)])
    assert code == 0 and "After RL: step 4" in (tmp_path / "report.html").read_text()


def test_metrics_records_read_back_what_was_written_in_compact_form(tmp_path):
    """Each line reads back equal to its JSON (ints stay ints, strings, booleans and lists kept); lines of the same
    keys share one key table; a torn last line is skipped and said."""
    from runners.artifacts.report import RunData, _read_metrics

    lines = [
        {"step": 1, "phase": "rl", "time": 1.5, "train/loss": -0.25, "ok": True, "note": [1, 2], "big": 2**60},
        {"step": 2, "phase": "rl", "time": 2.5, "train/loss": 0.125, "ok": False, "note": [], "big": 3},
        {"step": 2, "phase": "eval", "eval/solve_rate": float("nan")},
        {"step": 3, "phase": "rl", "time": 3.5, "train/loss": 0.5, "ok": True, "note": [3], "big": 4},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 3, "pha')
    data = RunData(run_dir=tmp_path)
    records = _read_metrics(path, data)
    assert len(records) == 4 and data.missing == ["1 unreadable line(s) of metrics.jsonl were skipped"]
    for record, line in zip(records, lines):
        if "eval/solve_rate" in line:
            continue
        assert dict(record) == line and type(record["step"]) is int and type(record["time"]) is float
    assert math.isnan(records[2]["eval/solve_rate"]) and records[2].get("missing") is None
    assert records[1]._layout is records[3]._layout  # the same keys and kinds: one table
    assert records[0]._layout is not records[1]._layout  # "big" on line 1 is too large for a double: kept aside


def test_a_long_curve_is_drawn_as_bucket_means():
    """More than MAX_CURVE_POINTS points become that many buckets of consecutive points, each at its mean step and
    mean value; a short curve is drawn as it is."""
    from runners.artifacts.report import MAX_CURVE_POINTS, _thin

    points = [(step, float(step % 2)) for step in range(2 * MAX_CURVE_POINTS)]
    xs, ys = _thin(points)
    assert len(xs) == len(ys) == MAX_CURVE_POINTS
    assert (xs[0], ys[0]) == (0.5, 0.5) and (xs[-1], ys[-1]) == (2 * MAX_CURVE_POINTS - 1.5, 0.5)
    assert _thin(points[:10]) == ([p[0] for p in points[:10]], [p[1] for p in points[:10]])

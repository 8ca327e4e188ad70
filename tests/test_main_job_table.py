"""benchmarks/main_job_table.py on hand-made run dirs, and benchmarks/sft_curve.py end to end on a tiny budget."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


main_job_table = _load("main_job_table")


def fake_run(directory: Path, seed: int, before: int, after: int, heldout: dict) -> Path:
    """A run dir holding the three files the table reads."""
    directory.mkdir(parents=True)
    summary = lambda solved, played=64: {"solved": solved, "episodes": played, "solve_rate": solved / played}  # noqa: E731
    results = {
        "eval_set": "loops-9x9",
        "before_rl": summary(before),
        "after_rl": summary(after),
        "heldout": {name: summary(*value) for name, value in heldout.items()},
        "eval_history": [{"step": 0, "solve_rate": before / 64}, {"step": 5, "solve_rate": 0.5}],
        "seconds": 600.0,
        "timing": {"rl_seconds": 120.0, "rl_steps_per_s": 0.1667},
        "peak_rss_gb": 1.5,
    }
    (directory / "eval_results.json").write_text(json.dumps(results))
    (directory / "config.json").write_text(json.dumps({"loop": {"seed": seed}}))
    invocation = {"command": f"mazegym train loop.seed={seed}", "calibration": {"units_per_s": 9.5}, "commit": "abc123"}
    info = {"invocations": [invocation if seed == 0 else {k: v for k, v in invocation.items() if k != "commit"}]}
    (directory / "run_info.json").write_text(json.dumps(info))
    return directory


def test_the_table_reads_each_run_and_publishes_between_the_markers(tmp_path):
    full = {"VisMaze-v0": (64,), "fresh-loops-9x9": (990, 1000), "loops-21x21": (16, 32), "heldout-5x5": (16, 16)}
    runs = [fake_run(tmp_path / "s0", 0, 10, 64, full), fake_run(tmp_path / "s1", 1, 32, 63, {})]
    readme, full, snapshot = tmp_path / "README.md", tmp_path / "full.md", tmp_path / "main_job.json"
    for page in (readme, full):
        page.write_text(f"intro\n{main_job_table.START}\nold table\n{main_job_table.END}\nafter\n")
    argv = ["--publish", "--readme", str(readme), "--full", str(full), "--snapshot", str(snapshot)]
    assert main_job_table.main([str(r) for r in runs] + argv) == 0
    short = [line for line in readme.read_text().splitlines() if line.startswith(("| 0 ", "| 1 "))]
    assert short[0] == "| 0 | 10/64 -> **64/64** | 64/64 | 99% | 2.0 min at calibration 9.5 | `abc123` |"
    assert short[1].startswith("| 1 | 32/64 -> **63/64** | - | - |")
    assert "Runs: `mazegym train loop.seed=0`, `mazegym train loop.seed=1`" in readme.read_text()
    page = full.read_text()
    assert page.startswith("intro\n") and page.endswith("after\n") and "old table" not in page
    rows = [line for line in page.splitlines() if line.startswith("| 0 ") or line.startswith("| 1 ")]
    assert len(rows) == 2
    assert "10/64 -> **64/64**" in rows[0] and "| 64/64 |" in rows[0] and "99% / - / 50%" in rows[0]
    assert "100% / - / - / - / - / -" in rows[0] and "10.0 min (RL 2.0 min, 0.167 steps/s)" in rows[0]
    assert "calibration 9.5" in rows[0] and "`mazegym train loop.seed=0`" in rows[0]
    assert "32/64 -> **63/64**" in rows[1] and "| - | - / - / - |" in rows[1]  # what a run did not evaluate reads "-"
    with pytest.raises(SystemExit, match="no eval_results.json, config.json, run_info.json"):
        main_job_table.main([str(tmp_path / "nothing")])
    with pytest.raises(SystemExit, match="markers"):
        main_job_table.publish("x", tmp_path / "s0" / "config.json")


def test_a_variants_section_goes_to_the_docs_page_alone(tmp_path):
    """``--section sizes`` writes the full table between the sizes markers of the docs page and leaves the README's
    main-job table and any other section as they were."""
    runs = [fake_run(tmp_path / "s0", 0, 10, 64, {"loops-13x13": (58,)})]
    readme, full, snapshot = tmp_path / "README.md", tmp_path / "full.md", tmp_path / "sizes.json"
    start, end = main_job_table.markers("sizes")
    readme.write_text(f"{main_job_table.START}\nmain job\n{main_job_table.END}\n")
    full.write_text(f"{main_job_table.START}\nmain job\n{main_job_table.END}\n{start}\nold\n{end}\n")
    argv = ["--publish", "--section", "sizes", "--readme", str(readme), "--full", str(full)]
    argv += ["--snapshot", str(snapshot)]
    assert main_job_table.main([str(r) for r in runs] + argv) == 0
    assert readme.read_text() == f"{main_job_table.START}\nmain job\n{main_job_table.END}\n"
    page = full.read_text()
    assert "main job" in page and "old" not in page and "10/64 -> **64/64**" in page.split(start)[1]
    assert json.loads(snapshot.read_text())["run_dirs"] == [str(tmp_path / "s0")]
    assert main_job_table.snapshot_path("sizes").name == "sizes.json"


@pytest.mark.slow
def test_sft_curve_trains_each_budget_and_writes_the_curve(tmp_path):
    """Two encoder budgets, two decoder budgets plus the preset's, every model played on the perfect-maze set."""
    sft_curve = _load("sft_curve")
    out = tmp_path / "curve"
    argv = ["--seeds", "0", "--vision-steps", "2", "4", "--sft-steps", "1", "2", "--decoder-at", "4"]
    argv += [
        "--sets",
        "VisMaze-v0",
        "--out",
        str(out),
        "model.vision_pretraining.batch_size=4",
        "sft.batch_size=4",
        "sft.steps=3",
    ]
    assert sft_curve.main(argv) == 0
    rows = json.loads((out / "curve.json").read_text())["rows"]
    budgets = sorted((r["vision_steps"], r["sft_steps"]) for r in rows)
    assert budgets == [(2, 3), (4, 1), (4, 2), (4, 3)]
    assert all(0 <= r["solved"]["VisMaze-v0"] <= 64 for r in rows)
    table = (out / "curve.md").read_text()
    assert "| 2 | " in table and "| 4 | " in table and "| 1 | " in table and "1 seeds" in table


def _block(page: Path, start: str, end: str) -> str:
    text = page.read_text()
    return text[text.index(start) + len(start) : text.index(end)].strip("\n")


def test_the_published_main_job_tables_are_what_their_snapshot_renders():
    """A figure typed into the README or the docs by hand, or a table left from an older publish, fails here."""
    snapshot = json.loads(main_job_table.SNAPSHOT.read_text())
    short, full = main_job_table.render(snapshot)
    assert _block(ROOT / "README.md", main_job_table.START, main_job_table.END) == short
    assert _block(ROOT / "docs" / "rl-earns-its-lift.md", main_job_table.START, main_job_table.END) == full


def _variant_sections() -> list[str]:
    """The sections published with ``--section``: every snapshot in docs/assets that names one."""
    snapshots = (json.loads(path.read_text()) for path in sorted((ROOT / "docs" / "assets").glob("*.json")))
    return [snapshot["section"] for snapshot in snapshots if isinstance(snapshot, dict) and "section" in snapshot]


VARIANT_SECTIONS = _variant_sections()


def test_every_known_variant_section_is_found():
    assert {"sizes", "cheaper-sizes", "anchor-cap"} <= set(VARIANT_SECTIONS)


@pytest.mark.parametrize("section", VARIANT_SECTIONS)
def test_the_published_variant_tables_are_what_their_snapshots_render(section):
    """A variant's runs on the docs page are what its snapshot (docs/assets/<section>.json) renders."""
    snapshot = json.loads(main_job_table.snapshot_path(section).read_text())
    assert snapshot["section"] == section
    _, full = main_job_table.render(snapshot)
    assert _block(ROOT / "docs" / "rl-earns-its-lift.md", *main_job_table.markers(section)) == full

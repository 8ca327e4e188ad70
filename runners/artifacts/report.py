"""Run reports: one self-contained HTML page of what a run did (``mazegym report RUN_DIR``).

The page reads only what the run wrote: ``metrics.jsonl`` (learning curves), the per-maze eval
records ``eval/step_<N>_<set>.json`` (the fixed set as solved/failed thumbnails before and after
RL, and GIF replays of the trained agent, rebuilt from maze + actions without the model),
``eval_results.json``, ``config.json`` and ``run_info.json`` (commands, package versions). Every
image is embedded as a base64 data URI, so the file can be mailed or attached as it is; it
needs no script and no network. Whatever is missing is said on the page instead.

The training side of ``run_info.json`` is :mod:`runners.train.run_info`.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from runners.train.run_info import RUN_INFO, package_versions

REPORT_NAME = "report.html"
"""Default file name of the report, in the run dir."""

RATE_KEYS = ("rollout/success_rate", "eval/solve_rate")
POLICY_KEYS = ("train/approx_kl", "train/kl", "train/entropy", "train/clip_frac")
REWARD_KEYS = ("train/return_mean", "train/reward_var_mean", "rollout/spl")


@dataclass
class RunData:
    """What a run directory holds, as far as the report is concerned."""

    run_dir: Path
    config: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    """Per-maze eval record files, in step order."""
    results: dict[str, Any] | None = None
    run_info: dict[str, Any] | None = None
    missing: list[str] = field(default_factory=list)
    """What the report could not show, and why (said on the page)."""


def _read_json(path: Path, data: RunData) -> Any:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except ValueError as exc:
        data.missing.append(f"{path.name} is not valid JSON ({exc}); its contents are left out")
        return None
    if not isinstance(value, dict):
        data.missing.append(f"{path.name} holds a {type(value).__name__}, not an object; its contents are left out")
        return None
    return value


def _read_metrics(path: Path, data: RunData) -> list[dict[str, Any]]:
    records, torn = [], 0
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except ValueError:  # the last line of a killed run may be torn
            torn += 1
            continue
        if isinstance(record, dict):
            records.append(record)
    if torn:
        data.missing.append(f"{torn} unreadable line(s) of metrics.jsonl were skipped")
    return records


def load_run(run_dir: str | Path) -> RunData:
    """Read a run directory; raises ValueError when it holds no mazegym run."""
    from runners.rollout.evaluate import list_eval_records

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir} is not a directory")
    markers = ("config.json", "metrics.jsonl", "eval_results.json", RUN_INFO)
    if not any((run_dir / m).is_file() for m in markers) and not list((run_dir / "eval").glob("step_*.json")):
        raise ValueError(
            f"{run_dir} holds no mazegym run (none of {', '.join(markers)} or eval/step_*.json); "
            f"pass the run dir a `mazegym train` wrote (e.g. runs/cpu-maze-vlm)"
        )
    data = RunData(run_dir)
    data.config = _read_json(run_dir / "config.json", data)
    data.results = _read_json(run_dir / "eval_results.json", data)
    data.run_info = _read_json(run_dir / RUN_INFO, data)
    invocations = (data.run_info or {}).get("invocations")
    shaped = isinstance(invocations, list) and all(isinstance(i, dict) for i in invocations)
    if invocations is not None and not shaped:
        data.missing.append(f"{RUN_INFO} lists its invocations in an unknown shape; they are left out")
        data.run_info = {**data.run_info, "invocations": []}
    data.metrics = _read_metrics(run_dir / "metrics.jsonl", data)
    data.evals = list_eval_records(run_dir)
    if data.config is None:
        data.missing.append("no config.json: the run's configuration is unknown")
    if not data.metrics:
        data.missing.append("no metrics (metrics.jsonl is missing or empty): no learning curves")
    if not data.evals:
        data.missing.append(
            "no per-maze eval records (eval/step_<N>_<set>.json): no maze grid and no replays "
            "(runs from before mazegym kept them have none)"
        )
    if data.results is None:
        data.missing.append("no eval_results.json: the run has not finished (or was interrupted)")
    return data


# --------------------------------------------------------------------------- images
def _data_uri(raw: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"


def _png(image: Any) -> str:
    """A numpy RGB image as a PNG data URI."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return _data_uri(buffer.getvalue(), "image/png")


def _figure_uri(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return _data_uri(buffer.getvalue(), "image/png")


def _series(records: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` over RL-side records (phases ``eval`` and ``rl``), in step order."""
    points = sorted(
        (int(r["step"]), float(r[key])) for r in records if r.get("phase") in ("eval", "rl") and _number(r.get(key))
    )
    return [p[0] for p in points], [p[1] for p in points]


def _number(value: Any) -> bool:
    """A finite int or float (NaN, infinities and booleans are left out of charts)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _chart(
    panels: list[tuple[str, list[tuple[str, list[int], list[float]]]]],
    xlabel: str = "RL step",
    ylim: tuple[float, float] | None = None,
) -> str:
    """One PNG of side-by-side panels, each with its named lines; matplotlib's Agg canvas, no pyplot state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(4.2 * len(panels), 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    for i, (name, lines) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for label, xs, ys in lines:
            ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(xlabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if ylim is not None:
            ax.set_ylim(*ylim)
        if len(lines) > 1:
            ax.legend(fontsize=8)
    return _figure_uri(fig)


def learning_curves(records: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(caption, PNG data URI)`` of every chart the metrics allow (empty when none)."""
    charts = []
    rates = [(k, *_series(records, k)) for k in RATE_KEYS]
    rates = [r for r in rates if r[1]]
    if rates:
        names = {"rollout/success_rate": "training rollouts (sampled)", "eval/solve_rate": "eval set (greedy)"}
        charts.append(
            (
                "Success: training rollouts and the fixed eval set",
                _chart([("success / solve rate", [(names[k], x, y) for k, x, y in rates])], ylim=(-0.02, 1.02)),
            )
        )
    for caption, keys in (("Return and SPL", REWARD_KEYS), ("Policy: KL, entropy, clip fraction", POLICY_KEYS)):
        panels = [(k, [(k, *_series(records, k))]) for k in keys]
        panels = [p for p in panels if p[1][0][1]]
        if panels:
            charts.append((caption, _chart(panels)))
    time_keys = sorted({k for r in records if r.get("phase") == "rl" for k in r if k.startswith("time/")})
    if time_keys:
        lines = [(k.split("/", 1)[1], *_series([r for r in records if r.get("phase") == "rl"], k)) for k in time_keys]
        charts.append(("Seconds per RL step, by phase (sync includes the parity probe)", _chart([("seconds", lines)])))
    for phase, key, caption in (("vision", "vision_loss", "Vision pretraining loss"), ("sft", "loss", "SFT loss")):
        points = sorted(
            (int(r["step"]), float(r[key])) for r in records if r.get("phase") == phase and _number(r.get(key))
        )
        if points:
            charts.append(
                (
                    caption,
                    _chart([(key, [(key, [p[0] for p in points], [p[1] for p in points])])], xlabel=f"{phase} step"),
                )
            )
    return charts


def _replay_gif(record: dict[str, Any], env: dict[str, Any], spec: Any) -> str:
    from mazegym.recording import encode_gif
    from runners.rollout.evaluate import replay_record

    return _data_uri(encode_gif(replay_record(record, env, spec).frames, fps=4.0), "image/gif")


# --------------------------------------------------------------------------- HTML
STYLE = """
body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 12px}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:32px}
.note{background:#fff6d5;border:1px solid #e6d07a;padding:8px 12px;border-radius:4px}
.grid{display:flex;flex-wrap:wrap;gap:6px}.cell{width:92px;text-align:center;font-size:10px}
.cell img{width:84px;image-rendering:pixelated}.ok{color:#007a00}.bad{color:#78009f}
.replays{display:flex;flex-wrap:wrap;gap:16px}.replay{width:260px;font-size:12px}
.replay img{width:240px;image-rendering:pixelated;border:1px solid #ccc}
pre{background:#f5f5f5;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:left}
.chart img{max-width:100%}
"""


CSP = (
    '<meta http-equiv="Content-Security-Policy" '
    "content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'\">"
)
"""The page runs no script and loads nothing: should an unescaped value ever reach it, the browser still runs
none of it (images come as data: URIs, the style is inline)."""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _rate(summary: dict[str, Any] | None) -> str:
    if not isinstance(summary, dict) or not summary:
        return "n/a"
    rate = summary.get("solve_rate", 0.0)
    rate = f"{100 * rate:.2f}%" if _number(rate) else _esc(rate)
    return f"{rate} ({_esc(summary.get('solved', '?'))}/{_esc(summary.get('episodes', '?'))})"


def _eval_grid(evaluation: dict[str, Any], specs: Sequence[Any]) -> str:
    """The fixed set as thumbnails in set order, each framed and captioned by its outcome."""
    from mazegym.recording import maze_thumbnail

    by_index = {r["index"]: r for r in evaluation["mazes"] if r.get("index") is not None}
    cells = []
    for i, spec in enumerate(specs):
        rec = by_index.get(i)
        solved = None if rec is None else bool(rec["success"])
        mark = "not played" if rec is None else ("&#10003; solved" if solved else "&#10007; failed")
        moves = "" if rec is None else f"<br>{_esc(rec.get('moves'))} / {_esc(rec.get('optimal_moves'))} moves"
        cls = "" if rec is None else ("ok" if solved else "bad")
        cells.append(
            f'<div class="cell"><img alt="maze {i}: {mark}" src="{_png(maze_thumbnail(spec, solved))}">'
            f'<br>#{i} <span class="{cls}">{mark}</span>{moves}</div>'
        )
    return '<div class="grid">' + "".join(cells) + "</div>"


def _replays(evaluation: dict[str, Any], specs: Sequence[Any], per_outcome: int) -> str:
    """GIF replays of the first ``per_outcome`` solved and failed mazes of an evaluation."""
    parts = []
    for solved in (True, False):
        chosen = [
            r
            for r in evaluation["mazes"]
            if bool(r["success"]) == solved and isinstance(r.get("index"), int) and 0 <= r["index"] < len(specs)
        ]
        chosen = chosen[:per_outcome]
        title = "Solved" if solved else "Failed"
        if not chosen:
            parts.append(f"<h3>{title}</h3><p>None in this evaluation.</p>")
            continue
        items = []
        for rec in chosen:
            try:
                gif = _replay_gif(rec, evaluation.get("env", {}), specs[rec["index"]])
            except (TypeError, ValueError):  # a damaged record (an action the env refuses): no picture, the rest stays
                gif = ""
            samples = "".join(
                f"<pre>{_esc(t) if t.strip() else '(empty reply)'}</pre>" for t in rec.get("invalid_samples", [])
            )
            samples = f"<br>Invalid replies, first ones:{samples}" if samples else ""
            count = rec.get("invalid", 0)
            invalid = f"; {_esc(count)} invalid repl{'y' if count == 1 else 'ies'}" if count else ""
            items.append(
                f'<div class="replay"><img alt="replay of maze {_esc(rec["index"])}" src="{gif}"><br>'
                f"maze #{_esc(rec['index'])} ({_esc(rec.get('maze_id'))}): {_esc(rec.get('moves'))} moves, "
                f"best {_esc(rec.get('optimal_moves'))}{invalid}{samples}</div>"
            )
        parts.append(f'<h3>{title}</h3><div class="replays">{"".join(items)}</div>')
    return "".join(parts)


def _mazes_section(data: RunData, replays: int) -> str:
    from mazegym.evalsets import EVAL_SETS, load_eval_set

    if not data.evals:
        return "<p>No per-maze eval records in this run, so no grid and no replays.</p>"
    eval_set = (data.config or {}).get("maze", {}).get("eval_set") or data.evals[0].get("set")
    main = [e for e in data.evals if e.get("set") == eval_set and e.get("label") != "heldout"]
    if not main:
        return f"<p>No per-maze records of the eval set {_esc(eval_set)}.</p>"
    if eval_set not in EVAL_SETS:
        return f"<p>Eval set {_esc(eval_set)} is unknown to this mazegym version; its mazes cannot be drawn.</p>"
    specs = load_eval_set(eval_set)
    first, last = main[0], main[-1]
    out = [
        f"<p>Fixed set <b>{_esc(eval_set)}</b> ({len(specs)} mazes), greedy decoding. Green frame: solved; "
        "purple: failed. The agent (blue) starts where shown; the goal is red. Under each maze: moves used / "
        "shortest path.</p>"
    ]
    shown = [("Before RL" if first["step"] == 0 else "First evaluation", first)]
    if last is not first:
        shown.append(("After RL", last))
    for title, evaluation in shown:
        out.append(f"<h3>{title}: step {_esc(evaluation['step'])}, solve rate {_rate(evaluation.get('summary'))}</h3>")
        out.append(_eval_grid(evaluation, specs))
    if last is not first:
        before = {r["index"]: r["success"] for r in first["mazes"] if r.get("index") is not None}
        after = {r["index"]: r["success"] for r in last["mazes"] if r.get("index") is not None}
        gained = sorted(i for i in after if after[i] and before.get(i) is False)
        lost = sorted(i for i in after if not after[i] and before.get(i) is True)
        out.append(
            f"<p>Newly solved: {', '.join(f'#{_esc(i)}' for i in gained) or 'none'}. "
            f"Newly failed: {', '.join(f'#{_esc(i)}' for i in lost) or 'none'}.</p>"
        )
    if len(main) > 2:
        history = ", ".join(f"step {_esc(e['step'])}: {_esc(e['summary'].get('solved', '?'))}" for e in main)
        out.append(f"<p>Every evaluation (mazes solved of {len(specs)}): {history}.</p>")
    out.append(
        f"<h2>Replays of the agent at step {_esc(last['step'])}</h2>"
        "<p>Rebuilt from the recorded actions on each maze, no model involved.</p>"
    )
    out.append(_replays(last, specs, replays))
    heldout = [e for e in data.evals if e.get("label") == "heldout"]
    if heldout:
        rows = "".join(
            f"<tr><td>{_esc(e['set'])}</td><td>{_esc(e['step'])}</td><td>{_rate(e.get('summary'))}</td></tr>"
            for e in heldout
        )
        out.append(f"<h3>Held-out sets</h3><table><tr><th>set</th><th>step</th><th>solve rate</th></tr>{rows}</table>")
    return "".join(out)


def _timings(data: RunData) -> str:
    """Wall time per phase from the records' timestamps, summed step timings, and the results' total."""
    rows = []
    for phase in ("vision", "sft", "rl"):
        stamps = [r["time"] for r in data.metrics if r.get("phase") == phase and _number(r.get("time"))]
        if len(stamps) > 1:
            steps = sum(1 for r in data.metrics if r.get("phase") == phase)
            rows.append((f"{phase} records", f"{steps} record(s), first to last {max(stamps) - min(stamps):.1f} s"))
    totals: dict[str, float] = {}
    for r in data.metrics:
        if r.get("phase") in ("rl", "eval"):
            for k, v in r.items():
                if k.startswith("time/") and _number(v):
                    totals[k] = totals.get(k, 0.0) + float(v)
    rows += [(f"sum of {k}", f"{v:.1f} s") for k, v in sorted(totals.items())]
    timing = (data.results or {}).get("timing")
    if isinstance(timing, dict) and _number(timing.get("rl_steps_per_s")):
        rows.append(
            (
                "RL steps/s (eval_results.json)",
                f"{timing['rl_steps_per_s']:.3f} over {timing.get('rl_steps', '?')} steps",
            )
        )
        means = timing.get("phase_mean_seconds")
        if isinstance(means, dict):
            rows += [(f"mean {k} per step", f"{v:.2f} s") for k, v in means.items() if _number(v)]
    for i, invocation in enumerate((data.run_info or {}).get("invocations") or []):
        cal = invocation.get("calibration") if isinstance(invocation, dict) else None
        if isinstance(cal, dict) and _number(cal.get("units_per_s")):
            rows.append(
                (
                    f"machine calibration, invocation {i + 1} (run_info.json)",
                    f"{cal['units_per_s']:.2f} units/s ({cal.get('unit', '?')}); {cal.get('cpus', '?')} CPUs, "
                    f"load average {cal.get('load_avg_1m', '?')} at the start",
                )
            )
    if data.results and isinstance(data.results.get("seconds"), (int, float)):
        rows.append(("last invocation, wall clock (eval_results.json)", f"{data.results['seconds']:.1f} s"))
    if not rows:
        return "<p>No timings recorded.</p>"
    return "<table>" + "".join(f"<tr><td>{_esc(a)}</td><td>{_esc(b)}</td></tr>" for a, b in rows) + "</table>"


def _details(data: RunData) -> str:
    out = ["<h3>Timings</h3>", _timings(data)]
    invocations = (data.run_info or {}).get("invocations") or []
    out.append("<h3>Commands</h3>")
    if invocations:
        out.append(
            "<table><tr><th>started</th><th>command</th></tr>"
            + "".join(
                f"<tr><td>{_esc(i.get('started', '?'))}</td>"
                f"<td><code>{_esc(i.get('command') or '(not recorded)')}</code></td></tr>"
                for i in invocations
            )
            + "</table>"
        )
        versions, where = invocations[-1].get("versions") or {}, "as recorded by the last training invocation"
    else:
        out.append("<p>Not recorded (the run has no run_info.json).</p>")
        versions, where = package_versions(), "of the environment that wrote this report (the run recorded none)"
    out.append(
        f"<h3>Package versions</h3><p>{_esc(where)}</p><table>"
        + "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in versions.items())
        + "</table>"
    )
    out.append("<h3>config.json</h3>")
    out.append(
        f"<details><summary>show</summary><pre>{_esc(json.dumps(data.config, indent=2))}</pre></details>"
        if data.config is not None
        else "<p>No config.json.</p>"
    )
    return "".join(out)


def render_html(data: RunData, replays: int = 3) -> str:
    """The report page of ``data`` (a :class:`RunData`), self-contained HTML."""
    name = (data.config or {}).get("preset", "")
    results = data.results or {}
    head = f"<h1>mazegym run report: {_esc(data.run_dir.name)}</h1><p>Run directory <code>{_esc(data.run_dir)}</code>"
    head += f", preset <b>{_esc(name)}</b>" if name else ""
    head += f"; written {_esc(time.strftime('%Y-%m-%d %H:%M'))}.</p>"
    capped = results.get("stopped_by_time_cap")
    if isinstance(capped, dict):
        head += (
            f'<div class="note"><b>Stopped by the time cap</b> (loop.max_minutes={_esc(capped.get("minutes"))}) at RL '
            f"step {_esc(capped.get('step'))} of {_esc(capped.get('planned'))} planned: the result below is of fewer "
            "steps than the recipe's.</div>"
        )
    if results.get("after_rl"):
        head += (
            f"<p>Solve rate on <b>{_esc(results.get('eval_set'))}</b>: before RL {_rate(results.get('before_rl'))}"
            f" &rarr; after {_esc(results.get('rl_steps', '?'))} RL steps {_rate(results['after_rl'])}.</p>"
        )
    if data.missing:
        head += (
            '<div class="note"><b>Not in this report:</b><ul>'
            + "".join(f"<li>{_esc(m)}</li>" for m in data.missing)
            + "</ul></div>"
        )
    charts = learning_curves(data.metrics)
    body = ["<h2>Learning curves</h2>"]
    body += [f'<div class="chart"><p>{_esc(c)}</p><img alt="{_esc(c)}" src="{uri}"></div>' for c, uri in charts] or [
        "<p>No metrics to plot.</p>"
    ]
    body += ["<h2>The fixed eval set, before and after RL</h2>", _mazes_section(data, replays)]
    body += ["<h2>Run details</h2>", _details(data)]
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{CSP}<title>mazegym report: '
        f"{_esc(data.run_dir.name)}</title><style>{STYLE}</style></head>"
        f"<body>{head}{''.join(body)}</body></html>\n"
    )


def write_report(run_dir: str | Path, out: str | Path | None = None, replays: int = 3) -> Path:
    """Write the HTML report of ``run_dir`` to ``out`` (default ``run_dir/report.html``), atomically."""
    from runners import atomic

    data = load_run(run_dir)
    target = Path(out) if out else Path(run_dir) / REPORT_NAME
    atomic.check_writable(target)  # before the replays are drawn
    return atomic.write_text(target, render_html(data, replays))


def command_line(argv: Sequence[str]) -> str:
    """The ``mazegym ...`` command line of ``argv`` (shell-quoted), for :func:`record_invocation`."""
    import shlex

    return shlex.join(["mazegym", *argv])

"""Run reports: one self-contained HTML page of what a run did (``mazegym report RUN_DIR``).

The page reads only what the run wrote: ``metrics.jsonl`` (learning curves), the per-maze eval
records ``eval/step_<N>_<set>.json`` (the fixed set as solved/failed thumbnails before and after
RL, and GIF replays of the trained agent, rebuilt from maze + actions without the model),
``eval_results.json``, ``config.json``, ``run_info.json`` (commands, package versions) and, when
``benchmarks/extrapolation.py RUN --json RUN/extrapolation.json`` has been run, its "think longer, solve
bigger" curve (:data:`EXTRAPOLATION`). Every
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
import sys
import time
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from mazegym.stats import format_interval
from runners.config.migrate import migrate
from runners.rollout import collectors
from runners.train.run_info import RUN_INFO, package_versions

REPORT_NAME = "report.html"
"""Default file name of the report, in the run dir."""

EXTRAPOLATION = "extrapolation.json"
"""The record ``benchmarks/extrapolation.py --json`` writes; the report draws it when the run dir holds one."""


@dataclass
class RunData:
    """What a run directory holds, as far as the report is concerned."""

    run_dir: Path
    config: dict[str, Any] | None = None
    metrics: list[MetricsRecord] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    """Per-maze eval record files, in step order."""
    results: dict[str, Any] | None = None
    run_info: dict[str, Any] | None = None
    extrapolation: dict[str, Any] | None = None
    """The iterations sweep of ``benchmarks/extrapolation.py`` (:data:`EXTRAPOLATION`), when present."""
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


class MetricsRecord(Mapping):
    """One line of ``metrics.jsonl``, read-only and compact: its numbers in one array of doubles, laid out by a key
    table shared with every line of the same keys, so a long run's curves take a fraction of their JSON text's memory.
    Ints and floats read back as they were written; other values (the phase, a string) are kept as they are."""

    __slots__ = ("_layout", "_numbers", "_others")

    def __init__(self, layout: dict[str, tuple[int, bool]], numbers: array, others: dict[str, Any] | None):
        self._layout, self._numbers, self._others = layout, numbers, others or {}

    def __getitem__(self, key: str) -> Any:
        if key in self._layout:
            position, is_int = self._layout[key]
            value = self._numbers[position]
            return int(value) if is_int else value
        return self._others[key]

    def __iter__(self) -> Iterator[str]:
        yield from self._layout
        yield from self._others

    def __len__(self) -> int:
        return len(self._layout) + len(self._others)


def _compact(record: dict[str, Any], layouts: dict[tuple, dict[str, tuple[int, bool]]]) -> MetricsRecord:
    """``record`` as a :class:`MetricsRecord`, its key table shared through ``layouts``."""
    numeric = [
        (key, value)
        for key, value in record.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 2**53
    ]
    signature = tuple((key, isinstance(value, int)) for key, value in numeric)
    layout = layouts.get(signature)
    if layout is None:
        layout = layouts[signature] = {sys.intern(key): (i, is_int) for i, (key, is_int) in enumerate(signature)}
    others = {sys.intern(key): value for key, value in record.items() if key not in layout}
    return MetricsRecord(layout, array("d", (value for _, value in numeric)), others)


def _read_metrics(path: Path, data: RunData) -> list[MetricsRecord]:
    """The records of ``metrics.jsonl``, read a line at a time (a torn or non-object line is skipped and counted)."""
    records, torn, layouts = [], 0, {}
    if not path.is_file():
        return records
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:  # the last line of a killed run may be torn
                torn += 1
                continue
            if isinstance(record, dict):
                records.append(_compact(record, layouts))
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
    data.config = _current_layout(_read_json(run_dir / "config.json", data))
    data.results = _read_json(run_dir / "eval_results.json", data)
    data.run_info = _read_json(run_dir / RUN_INFO, data)
    invocations = (data.run_info or {}).get("invocations")
    shaped = isinstance(invocations, list) and all(isinstance(i, dict) for i in invocations)
    if invocations is not None and not shaped:
        data.missing.append(f"{RUN_INFO} lists its invocations in an unknown shape; they are left out")
        data.run_info = {**data.run_info, "invocations": []}
    data.metrics = _read_metrics(run_dir / "metrics.jsonl", data)
    data.evals = list_eval_records(run_dir)
    if (run_dir / EXTRAPOLATION).is_file():
        record = _read_json(run_dir / EXTRAPOLATION, data)
        if isinstance(record, dict) and isinstance(record.get("sweep"), dict) and record["sweep"]:
            data.extrapolation = record
        elif record is not None:
            data.missing.append(f"{EXTRAPOLATION} holds no iterations sweep: no think-longer curve")
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


def think_longer_figure(record: dict[str, Any]) -> Any:
    """The "think longer, solve bigger" chart of an extrapolation record: greedy solve rate against the vision
    encoder's test-time iterations, one line per maze size (a matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    cmap = plt.get_cmap("viridis")
    sweeps = record["sweep"]
    trained = record.get("trained_size")
    for i, (name, row) in enumerate(sweeps.items()):
        size = record.get("sizes", {}).get(name, "?")
        xs = [int(n) for n in row]
        ys = [100 * row[n]["solve_rate"] for n in row]
        label = f"{size}x{size}" + (" (trained)" if size == trained else "")
        ax.plot(xs, ys, marker="o", color=cmap(i / max(1, len(sweeps) - 1)), label=label)
    depth = record.get("trained_iterations")
    if depth:
        ax.axvline(depth, color="gray", linestyle=":", linewidth=1)
        ax.text(depth, 2, " trained depth", color="gray", fontsize=8)
    ax.set_xlabel("vision encoder iterations at test time")
    ax.set_ylabel("greedy solve rate (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(f"Solve rate against test-time encoder iterations (trained on {trained}x{trained} only)")
    ax.legend(title="maze size", fontsize=8, title_fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def _extrapolation_section(record: dict[str, Any]) -> str:
    import matplotlib.pyplot as plt

    fig = think_longer_figure(record)
    uri = _figure_uri(fig)
    plt.close(fig)
    caption = (
        f"Greedy solve rate on the first {_esc(record.get('first', '?'))} mazes of each held-out size, with the vision "
        "encoder run for a fixed number of iterations (benchmarks/extrapolation.py; nothing retrained, no solver)."
    )
    return (
        '<h2>Other maze sizes: think longer, solve bigger</h2><div class="chart">'
        f'<p class="caption">{caption}</p><img alt="solve rate against encoder iterations per maze size" '
        f'src="{uri}"></div>'
    )


MAX_CURVE_POINTS = 2000
"""The most points a curve is drawn with; a longer one is drawn as this many bucket means (a chart is narrower)."""


def _thin(points: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """(steps, values) of sorted ``points``; more than :data:`MAX_CURVE_POINTS` become the means of as many
    consecutive buckets (the step drawn is its bucket's mean step)."""
    if len(points) <= MAX_CURVE_POINTS:
        return [p[0] for p in points], [p[1] for p in points]
    edges = [round(i * len(points) / MAX_CURVE_POINTS) for i in range(MAX_CURVE_POINTS + 1)]
    buckets = [points[a:b] for a, b in zip(edges[:-1], edges[1:])]
    return [math.fsum(p[0] for p in b) / len(b) for b in buckets], [
        math.fsum(p[1] for p in b) / len(b) for b in buckets
    ]


def _phase_series(records: Sequence[Mapping[str, Any]], key: str, phases: tuple[str, ...]) -> tuple[list, list]:
    """(steps, values) of ``key`` over the records of ``phases``, in step order, thinned by :func:`_thin`."""
    return _thin(
        sorted((int(r["step"]), float(r[key])) for r in records if r.get("phase") in phases and _number(r.get(key)))
    )


def _series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list, list]:
    """(steps, values) of ``key`` over RL-side records (phases ``eval`` and ``rl``), in step order."""
    return _phase_series(records, key, ("eval", "rl"))


def _number(value: Any) -> bool:
    """A finite int or float (NaN, infinities and booleans are left out of charts)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class Panel:
    """One plot of a chart: a human title, a y-axis label and its named lines."""

    title: str
    ylabel: str
    lines: list[tuple[str, list[int], list[float]]]
    """``(legend name, steps, values)`` per line."""
    xlabel: str = "RL step"
    log: bool = False
    """Log y-axis (a first-step spike would flatten the rest of a linear one); the y-label then says so."""
    ylim: tuple[float, float] | None = None


@dataclass
class Chart:
    """A row of panels under one heading, with a caption saying how to read it."""

    heading: str
    panels: list[Panel]
    caption: str = ""

    def alt(self) -> str:
        """The image's alt text: the heading and each panel's title and y-axis."""
        parts = [f"{p.title} (y: {p.ylabel}{', log scale' if p.log else ''})" for p in self.panels]
        return f"{self.heading}: {'; '.join(parts)}"


METRIC_PANELS: dict[str, tuple[str, str]] = {
    "train/return_mean": ("Mean return of the training episodes", "return"),
    "train/reward_var_mean": ("Reward variance within a group", "variance of the return"),
    "rollout/spl": ("SPL of the training rollouts", "SPL (success weighted by path length)"),
    "train/approx_kl": ("KL between sampler and trained policy", "approximate KL (nats)"),
    "train/kl": ("KL to the reference policy", "KL (nats)"),
    "train/entropy": ("Policy entropy", "entropy (nats per token)"),
    "train/clip_frac": ("Share of tokens clipped by PPO", "clipped fraction"),
}
"""Human title and y-axis label of each single-metric panel."""


def _setting(config: dict[str, Any] | None, section: str, key: str, default: Any = None) -> Any:
    """``config[section][key]`` of a config.json, or ``default`` when the run has none (or another shape)."""
    part = (config or {}).get(section)
    return part.get(key, default) if isinstance(part, dict) else default


def _current_layout(config: Any) -> Any:
    """A config.json in today's layout (one saved before each part owned its section is migrated); anything else,
    or one mazegym cannot read, as it is."""
    if not isinstance(config, dict):
        return config
    try:
        return migrate(config)
    except (ValueError, KeyError, TypeError, AttributeError):
        return config


def _branches(config: dict[str, Any] | None) -> bool:
    """Whether a config.json's run trained on a branching collector (its training episodes are one-move branches)."""
    collector = _setting(config, "rollout", "collector")
    name = collector.get("name") if isinstance(collector, dict) else None
    try:
        return isinstance(name, str) and collectors.get(name).scheme == "branching"
    except KeyError:  # a collector this process has not loaded
        return False


def _log_axis(values: Sequence[float], loss: bool = False) -> bool:
    """A log y-axis for positive values with a spike (the largest over 20x the median); for a loss, also when it
    falls by 10x or more (a loss curve reads as orders of magnitude)."""
    if not values or min(values) <= 0:
        return False
    ordered = sorted(values)
    spike = ordered[-1] > 20 * ordered[len(ordered) // 2]
    return spike or (loss and ordered[-1] >= 10 * ordered[0])


def _figure(chart: Chart) -> Any:
    """The matplotlib Figure of ``chart`` (Agg canvas, no pyplot state): one titled, labelled axes per panel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(4.2 * len(chart.panels), 3.2), layout="constrained")
    FigureCanvasAgg(fig)
    for i, panel in enumerate(chart.panels):
        ax = fig.add_subplot(1, len(chart.panels), i + 1)
        for label, xs, ys in panel.lines:
            ax.plot(xs, ys, marker="o" if len(xs) <= 30 else None, markersize=3, label=label)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel + (" (log scale)" if panel.log else ""))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if panel.log:
            ax.set_yscale("log")
        if panel.ylim is not None:
            ax.set_ylim(*panel.ylim)
        if len(panel.lines) > 1:
            ax.legend(fontsize=8)
    return fig


def _success_caption(config: dict[str, Any] | None, has_greedy_start: bool) -> str:
    """How to read the training success beside the eval solve rate, for the run's recipe."""
    eval_set = _setting(config, "maze", "eval_set") or "the fixed eval set"
    temperature = _setting(config, "eval", "temperature", 0.0)
    how = "greedy play (temperature 0)" if not temperature else f"play at temperature {temperature}"
    evaluation = f"The eval line is {how} of every maze of {eval_set} from its start: the number to read for progress."
    if _branches(config):
        training = (
            "The training line is not a solve rate of whole plays: with branching rollouts the training episodes "
            "are one-move branches (all 4 moves at every open cell of fresh training mazes, each followed by the "
            "greedy policy), and a branch succeeds only when its move leads to the goal, so wrong moves and wall "
            "bumps count as failures and the line stays far below the eval line even for a perfect policy."
        )
        if has_greedy_start:
            training += (
                " The greedy-from-the-start line is the greedy policy's play of the same training mazes from their"
                " start, the training-side number comparable with the eval line."
            )
    else:
        sampled = _setting(config, "rollout", "temperature")
        group = _setting(config, "rollout", "group_size")
        detail = f" (temperature {sampled}, {group} per maze)" if sampled is not None and group is not None else ""
        training = (
            f"The training line is the share of sampled plays{detail} of fresh training mazes that reach the goal: "
            "the episodes the update learns from. Sampling explores, so it sits below the greedy eval of the same "
            "policy."
        )
    return f"{training} {evaluation}"


def chart_plan(records: Sequence[dict[str, Any]], config: dict[str, Any] | None = None) -> list[Chart]:
    """The charts the metrics allow, leaving out panels that do not apply to the run's recipe (``config``)."""
    charts = _success_charts(records, config) + _training_charts(records, config) + _timing_charts(records, config)
    return charts + _supervised_charts(records)


def _success_charts(records: Sequence[dict[str, Any]], config: dict[str, Any] | None) -> list[Chart]:
    """The training success beside the eval solve rate (none when no rate was logged)."""
    rate_names = {
        "rollout/success_rate": "training episodes (sampled)",
        "rollout/greedy_start_success": "training mazes, greedy from the start",
        "eval/solve_rate": "eval set (greedy)",
    }
    if _branches(config):
        rate_names["rollout/success_rate"] = "training branches"
    if _setting(config, "eval", "temperature", 0.0):
        rate_names["eval/solve_rate"] = "eval set (sampled)"
    rates = [(name, *_series(records, key)) for key, name in rate_names.items()]
    rates = [r for r in rates if r[1]]
    if not rates:
        return []
    has_greedy_start = any(r[0] == rate_names["rollout/greedy_start_success"] for r in rates)
    panel = Panel("Training success and eval solve rate", "share that reached the goal", rates, ylim=(-0.02, 1.02))
    caption = _success_caption(config, has_greedy_start)
    return [Chart("Success: training episodes and the fixed eval set", [panel], caption)]


def _training_charts(records: Sequence[dict[str, Any]], config: dict[str, Any] | None) -> list[Chart]:
    """Return and reward spread; the policy's KL, entropy and clipping."""
    charts = []
    left_out = {"rollout/spl"} if _branches(config) else set()  # one-move branches have no path SPL could weigh
    for heading, keys in (
        ("Return and reward spread", ("train/return_mean", "train/reward_var_mean", "rollout/spl")),
        ("Policy: KL, entropy, clipping", ("train/approx_kl", "train/kl", "train/entropy", "train/clip_frac")),
    ):
        panels = []
        for key in keys:
            xs, ys = _series(records, key)
            if xs and key not in left_out:
                title, ylabel = METRIC_PANELS[key]
                panels.append(Panel(title, ylabel, [(key, xs, ys)], log=_log_axis(ys)))
        caption = ""
        if "rollout/spl" in keys and left_out and _series(records, "rollout/spl")[0]:
            caption = (
                "SPL is left out: with branching rollouts the training episodes are one-move branches, which "
                "have no path whose length SPL could weigh."
            )
        if panels:
            charts.append(Chart(heading, panels, caption))
    return charts


def _timing_charts(records: Sequence[dict[str, Any]], config: dict[str, Any] | None) -> list[Chart]:
    """Seconds per RL step, by phase (none when no timing was logged)."""
    rl = [r for r in records if r.get("phase") == "rl"]
    time_keys = sorted({k for r in rl for k in r if k.startswith("time/")})
    if not time_keys:
        return []
    lines = [(k.split("/", 1)[1], *_series(rl, k)) for k in time_keys]
    parity = _setting(config, "loop", "parity_every", 0)
    caption = "Sync publishes the new adapter to the generator"
    caption += f" and, every {parity} steps, runs the parity probe." if parity else "."
    if "time/eval" in time_keys or "time/checkpoint" in time_keys:
        caption += " The eval and checkpoint phases take time only on the steps that evaluate or save."
    return [Chart("Seconds per RL step, by phase", [Panel("Wall time of each phase", "seconds", lines)], caption)]


SUPERVISED_PANELS = (
    (
        "vision",
        "Vision pretraining",
        (
            ("vision_loss", "Vision pretraining loss", "loss"),
            ("vision_move_accuracy", "Vision pretraining: move accuracy", "accuracy"),
        ),
    ),
    ("sft", "Supervised fine-tuning (SFT)", (("loss", "SFT loss", "cross-entropy loss"),)),
)
"""(phase, heading, (metric, panel title, y label) ...) of the supervised stages' charts."""


def _supervised_charts(records: Sequence[dict[str, Any]]) -> list[Chart]:
    """Vision pretraining and SFT: their losses and accuracy against their own steps."""
    charts = []
    for phase, heading, keys in SUPERVISED_PANELS:
        panels = []
        for key, title, ylabel in keys:
            xs, ys = _phase_series(records, key, (phase,))
            if xs:
                loss = key.endswith("loss")
                log = _log_axis(ys, loss=loss) or (key == "vision_loss" and min(ys) > 0)
                panels.append(
                    Panel(
                        title,
                        ylabel,
                        [(key, xs, ys)],
                        xlabel=f"{phase} step",
                        log=log,
                        ylim=None if loss else (-0.02, 1.02),
                    )
                )
        if panels:
            logged = [p.title for p in panels if p.log]
            caption = (
                f"{' and '.join(logged)} on a log y-axis: the first steps' loss can be orders of magnitude above the "
                "rest and would flatten a linear one."
                if logged
                else ""
            )
            charts.append(Chart(heading, panels, caption))
    return charts


def learning_curves(records: Sequence[dict[str, Any]], config: dict[str, Any] | None = None) -> list[tuple[Chart, str]]:
    """``(chart, PNG data URI)`` of every chart the metrics allow (empty when none); see :func:`chart_plan`."""
    return [(chart, _figure_uri(_figure(chart))) for chart in chart_plan(records, config)]


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
.legend{margin:4px 0 8px;font-size:13px}.swatch{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;
vertical-align:middle}.caption{color:#444;font-size:14px;max-width:900px}
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
    """``48.44% (31/64; 95% interval 36.6-60.4%)``: a summary's solve rate, its counts and their Wilson interval."""
    if not isinstance(summary, dict) or not summary:
        return "n/a"
    rate = summary.get("solve_rate", 0.0)
    rate = f"{100 * rate:.2f}%" if _number(rate) else _esc(rate)
    solved, episodes = summary.get("solved", "?"), summary.get("episodes", "?")
    counts = all(isinstance(v, int) and not isinstance(v, bool) for v in (solved, episodes))
    interval = f"; 95% interval {format_interval(solved, episodes)}" if counts and 0 <= solved <= episodes else ""
    return f"{rate} ({_esc(solved)}/{_esc(episodes)}{interval})"


def _legend(outcomes: Sequence[bool | None]) -> str:
    """The thumbnails' frame colours, each beside its name (solved green, failed purple, not played dark)."""
    from mazegym.recording import OUTCOME_NAMES, OUTCOME_RGB

    items = "".join(
        f'<span class="swatch" style="background:rgb{OUTCOME_RGB[o]}"></span>{OUTCOME_NAMES[o]}' for o in outcomes
    )
    return f'<div class="legend">Frame colour:{items}</div>'


def _eval_grid(evaluation: dict[str, Any], specs: Sequence[Any]) -> str:
    """The fixed set as thumbnails in set order, each framed and captioned by its outcome, under a colour legend."""
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
    outcomes = [True, False] + ([None] if len(by_index.keys() & set(range(len(specs)))) < len(specs) else [])
    return _legend(outcomes) + '<div class="grid">' + "".join(cells) + "</div>"


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
    charts = learning_curves(data.metrics, data.config)
    body = ["<h2>Learning curves</h2>"]
    body += [
        f'<div class="chart"><h3>{_esc(c.heading)}</h3>'
        + (f'<p class="caption">{_esc(c.caption)}</p>' if c.caption else "")
        + f'<img alt="{_esc(c.alt())}" src="{uri}"></div>'
        for c, uri in charts
    ] or ["<p>No metrics to plot.</p>"]
    body += ["<h2>The fixed eval set, before and after RL</h2>", _mazes_section(data, replays)]
    if data.extrapolation is not None:
        body.append(_extrapolation_section(data.extrapolation))
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

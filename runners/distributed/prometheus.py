"""Prometheus export of the Ray runner's metrics through ``ray.util.metrics`` (for the Grafana dashboard)."""

from __future__ import annotations

import math

PROMETHEUS_METRICS = {
    "ray_mazegym_train": "gauge: every scalar training/eval metric, tag key=<metric name>",
    "ray_mazegym_phase_seconds": "gauge: seconds spent in each phase of the last step, tag phase",
    "ray_mazegym_step": "gauge: the last completed step",
    "ray_mazegym_adapter_version": "gauge: adapter version the engines sample with",
    "ray_mazegym_steps_total": "counter: steps completed (repeated steps after a restart count again)",
    "ray_mazegym_episodes_total": "counter: training episodes generated",
    "ray_mazegym_worker_restarts_total": "counter: worker-group rebuilds after a worker died",
}
"""Prometheus names (Ray adds the ``ray_`` prefix and ``_total`` to counters); every series has a
``run`` tag. The Grafana dashboard in ``deploy/grafana`` queries exactly these."""


class PrometheusExporter:
    """Mirrors the driver's metrics into ``ray.util.metrics`` so Prometheus can scrape them.

    Ray exports them on every node's metrics port (``ray start --metrics-export-port``;
    KubeRay: 8080), where Prometheus, and the Grafana dashboard, pick them up.
    """

    def __init__(self, run_name: str):
        from ray.util.metrics import Counter, Gauge

        self.tags = {"run": run_name}
        self.train = Gauge("mazegym_train", "Training and eval metrics of the Ray runner", tag_keys=("run", "key"))
        self.phase = Gauge("mazegym_phase_seconds", "Seconds per phase of the last step", tag_keys=("run", "phase"))
        self.step = Gauge("mazegym_step", "Last completed step", tag_keys=("run",))
        self.version = Gauge("mazegym_adapter_version", "Adapter version used by the engines", tag_keys=("run",))
        self.steps = Counter("mazegym_steps", "Steps completed", tag_keys=("run",))
        self.episodes = Counter("mazegym_episodes", "Training episodes generated", tag_keys=("run",))
        self.restarts = Counter("mazegym_worker_restarts", "Worker-group rebuilds", tag_keys=("run",))

    def record_step(
        self, step: int, metrics: dict[str, float], timings: dict[str, float], episodes: int, version: int
    ) -> None:
        """Export one step's metrics (non-finite values are skipped: Prometheus gauges hate NaN)."""
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.train.set(float(value), tags={**self.tags, "key": key})
        for phase, seconds in timings.items():
            self.phase.set(float(seconds), tags={**self.tags, "phase": phase})
        self.step.set(step, tags=self.tags)
        self.version.set(version, tags=self.tags)
        self.steps.inc(1.0, tags=self.tags)
        if episodes:
            self.episodes.inc(float(episodes), tags=self.tags)

    def record_restart(self) -> None:
        """Count one rebuild of the worker group."""
        self.restarts.inc(1.0, tags=self.tags)

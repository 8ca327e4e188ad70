"""MetricsLogger: JSONL always, TensorBoard, and the W&B / MLflow calls it makes (against recording fakes).

The fakes stand in for the installed libraries (neither is a dependency); they record the calls
so the tests check *our* side of each integration: what is logged, under which names and steps.
"""

from __future__ import annotations

import json
import sys
import types

import pytest

from runners.train.metrics import MetricsLogger


class Recorder(types.ModuleType):
    """A module whose every attribute is a function recording its calls."""

    def __init__(self, name: str):
        super().__init__(name)
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def record(*args, **kwargs):
            self.calls.append((attr, args, kwargs))
            return self

        return record

    def named(self, attr: str) -> list[tuple[tuple, dict]]:
        return [(a, k) for name, a, k in self.calls if name == attr]


@pytest.fixture
def fake(monkeypatch):
    def install(name: str) -> Recorder:
        module = Recorder(name)
        monkeypatch.setitem(sys.modules, name, module)
        return module

    return install


def test_jsonl_keeps_everything_and_tensorboard_gets_finite_scalars(tmp_path):
    logger = MetricsLogger(tmp_path, config={"a": 1}, echo=lambda m: None)
    logger.log(3, {"loss": 0.5, "note": "text", "bad": float("nan")}, phase="rl")
    logger.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 3 and rows[0]["phase"] == "rl" and rows[0]["note"] == "text" and rows[0]["loss"] == 0.5
    assert any((tmp_path / "tensorboard").iterdir())


def test_wandb_gets_one_x_axis_per_phase_so_rl_steps_after_sft_are_kept(tmp_path, fake):
    wandb = fake("wandb")
    logger = MetricsLogger(tmp_path, sinks={"wandb": "p"}, config={"lr": 1e-4}, tensorboard=False, echo=lambda m: None)
    logger.log(300, {"loss": 0.1}, phase="sft")
    logger.log(1, {"loss": 0.2}, phase="rl")
    logger.log(2, {"loss": 0.3}, phase="rl")
    logger.close()
    ((init_args, init_kwargs),) = wandb.named("init")
    assert init_kwargs["project"] == "p" and init_kwargs["config"] == {"lr": 1e-4}
    logs = wandb.named("log")
    assert [kw for _, kw in logs] == [{}, {}, {}], "no global step= (W&B would drop RL steps < 300)"
    assert [a[0] for a, _ in logs] == [
        {"sft/loss": 0.1, "sft/step": 300},
        {"rl/loss": 0.2, "rl/step": 1},
        {"rl/loss": 0.3, "rl/step": 2},
    ]
    axes = [(a, k) for a, k in wandb.named("define_metric") if k.get("step_metric")]
    assert axes == [(("sft/*",), {"step_metric": "sft/step"}), (("rl/*",), {"step_metric": "rl/step"})]
    assert wandb.named("finish")


def test_mlflow_gets_params_and_stepped_metrics(tmp_path, fake):
    mlflow = fake("mlflow")
    logger = MetricsLogger(
        tmp_path, sinks={"mlflow": "p"}, config={"algo": {"lr": 1e-4}}, tensorboard=False, echo=lambda m: None
    )
    logger.log(5, {"loss": 0.25, "skip": "text"}, phase="rl")
    logger.close()
    assert mlflow.named("set_experiment") == [(("p",), {})]
    assert mlflow.named("start_run")[0][1] == {"run_name": tmp_path.name}
    assert mlflow.named("log_params") == [(({"algo.lr": 1e-4},), {})]
    assert mlflow.named("log_metrics") == [(({"rl.loss": 0.25},), {"step": 5})]
    assert mlflow.named("end_run")


def test_missing_tracking_libraries_are_reported_not_fatal(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "mlflow", None)
    said = []
    logger = MetricsLogger(
        tmp_path, sinks={"wandb": "mazegym", "mlflow": "mazegym"}, tensorboard=False, echo=said.append
    )
    logger.log(1, {"loss": 1.0})
    logger.close()
    assert logger.wandb is None and logger.mlflow is None
    assert any("wandb is not installed" in m for m in said) and any("mlflow is not installed" in m for m in said)

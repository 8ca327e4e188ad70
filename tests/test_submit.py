"""``mazegym submit``: entrypoint/runtime-env building, auth-token lookup, and a real submission
to a local ``ray start --head`` that the test starts and stops itself."""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.commands import submit as submit_command
from runners.distributed import submit


def test_entrypoint_runs_mazegym_train_on_ray_with_quoted_args():
    cmd = submit.build_entrypoint(["--run-dir", "a b", "loop.seed=3"])
    assert shlex.split(cmd) == [
        "python",
        "-m",
        "runners.cli",
        "train",
        "--run-dir",
        "a b",
        "loop.seed=3",
        "runner.kind=ray",
    ]


def test_runtime_env_uploads_working_dir_without_virtualenvs(tmp_path):
    env = submit.build_runtime_env(submit.SubmitConfig(working_dir=str(tmp_path), pip=["x==1"], env={"A": "1"}))
    assert env["working_dir"] == str(tmp_path.resolve())
    assert ".venv*" in env["excludes"] and "runs" in env["excludes"]
    assert env["pip"] == ["x==1"]
    assert env["env_vars"] == {"PYTHONUNBUFFERED": "1", "A": "1"}
    assert "working_dir" not in submit.build_runtime_env(submit.SubmitConfig())


def test_missing_working_dir_fails_fast(tmp_path):
    with pytest.raises(FileNotFoundError, match="working_dir"):
        submit.build_runtime_env(submit.SubmitConfig(working_dir=str(tmp_path / "nope")))


def test_auth_token_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert submit.find_auth_token() is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    assert submit.find_auth_token() == "from-home"
    path = tmp_path / "tok"
    path.write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(path))
    assert submit.find_auth_token() == "from-path"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    assert submit.find_auth_token() == "from-env"
    assert submit.find_auth_token("explicit") == "explicit"


def test_cli_arguments_split_at_double_dash():
    ns = submit.build_parser().parse_args(["--address", "http://h:8265", "--env", "K=V", "--wait", "--", "--seed", "1"])
    cfg, train_args = submit.config_from_args(ns)
    assert cfg.address == "http://h:8265" and cfg.env == {"K": "V"} and cfg.wait
    assert train_args == ["--seed", "1"]
    with pytest.raises(ValueError, match="KEY=VALUE"):
        submit.config_from_args(submit.build_parser().parse_args(["--env", "novalue"]))


def test_submit_subcommand_plugs_into_a_subparsers_tree():
    import argparse

    parser = argparse.ArgumentParser(prog="mazegym")
    sub = parser.add_subparsers(dest="command")
    submit_command.add_parser(sub, [])
    ns = parser.parse_args(["submit", "--address", "http://h:8265", "--", "--preset", "cpu-tiny", "loop.steps=2"])
    assert ns.func is submit.run_submit_args
    cfg, train_args = submit.config_from_args(ns)
    assert cfg.address == "http://h:8265" and train_args == ["--preset", "cpu-tiny", "loop.steps=2"]


# ------------------------------------------------------------------ against a real head node
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head(tmp_path):
    """A `ray start --head --block` in its own process group, with token auth; killed afterwards."""
    pytest.importorskip("ray")
    token = secrets.token_hex(32)
    gcs_port, dash_port = _free_port(), _free_port()
    env = dict(
        os.environ,
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token,
        OMP_NUM_THREADS="1",
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    )
    log = open(tmp_path / "head.log", "w")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--block",
            "--num-cpus",
            "1",
            "--port",
            str(gcs_port),
            "--dashboard-port",
            str(dash_port),
            "--dashboard-host",
            "127.0.0.1",
            "--disable-usage-stats",
            "--include-dashboard",
            "true",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{dash_port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                submit.make_client(address, token).list_jobs()
                break
            except Exception:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("ray head did not come up:\n" + (tmp_path / "head.log").read_text()[-2000:])
                time.sleep(1.0)
        yield address, token
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(3)
        log.close()


@pytest.mark.ray
@pytest.mark.slow
def test_submit_to_a_local_head_runs_the_runner_and_reports_failures(ray_head, capsys):
    address, token = ray_head
    # Without the token the cluster refuses the submission.
    with pytest.raises(Exception):
        submit.make_client(address, "wrong-token").list_jobs()

    cfg = submit.SubmitConfig(address=address, auth_token=token, wait=True, timeout_s=240)
    job_id = submit.submit_run(["--help"], cfg)
    client = submit.make_client(address, token)
    assert client.get_job_status(job_id).value == "SUCCEEDED"
    assert "runner.num_workers" in client.get_job_logs(job_id)  # the runner's CLI (mazegym train) answered

    with pytest.raises(RuntimeError, match="FAILED"):
        submit.submit_run(["--no-such-flag"], cfg)

    # The CLI hook: exit code 0 and the job id on stdout.
    rc = submit.submit_main(["--address", address, "--auth-token", token, "--wait", "--", "--help"])
    assert rc == 0
    assert capsys.readouterr().out.strip().startswith("raysubmit_")

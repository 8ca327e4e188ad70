"""`mazegym submit` uploads only tracked files and explicit includes, never secrets or weights, and guards its token."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from urllib.parse import urlsplit

from runners.distributed import submit

SOURCE = ["pyproject.toml", "runners/cli.py", "mazegym/data/eval.json"]
SECRETS_AND_WEIGHTS = [
    ".env",
    "secrets.json",
    ".ssh/id_rsa",
    ".netrc",
    ".ray/auth_token",
    "wandb/settings",
    "model.pt",
    "adapter/adapter_model.safetensors",
    "checkpoints/step_000001/state.json",
    "runs/x/metrics.jsonl",
    "deploy/.env.prod",
    "keys/server.pem",
]


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "repo"
    for rel in SOURCE + SECRETS_AND_WEIGHTS + ["notes/untracked.txt", "extra/config.yaml"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    # Some secrets and weights are even committed by mistake: they must still stay home.
    subprocess.run(git + ["add", "-f", *SOURCE, ".env", "model.pt", "wandb/settings"], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    return root


def test_only_tracked_files_minus_secrets_and_weights_are_uploaded(checkout):
    assert submit.upload_files(submit.SubmitConfig(working_dir=str(checkout))) == sorted(SOURCE)


def test_includes_add_untracked_files_but_never_secrets(checkout):
    cfg = submit.SubmitConfig(working_dir=str(checkout), includes=["extra"])
    assert submit.upload_files(cfg) == sorted(SOURCE + ["extra/config.yaml"])
    for bad in (".env", ".ssh", "checkpoints", "../outside", "missing.txt"):
        with pytest.raises(ValueError, match="--include"):
            submit.upload_files(submit.SubmitConfig(working_dir=str(checkout), includes=[bad]))


def test_a_directory_outside_git_is_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="git checkout"):
        submit.upload_files(submit.SubmitConfig(working_dir=str(tmp_path / "plain")))


class _Status:
    value = "SUCCEEDED"

    def is_terminal(self):
        return True


class _Client:
    def __init__(self):
        self.uploaded: list[str] = []

    def submit_job(self, entrypoint, runtime_env, submission_id, metadata):
        root = Path(runtime_env["working_dir"])
        self.uploaded = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        return "job-1"

    def get_job_status(self, job_id):
        return _Status()

    def get_job_logs(self, job_id):
        raise AssertionError("--follow must stream the log, not download all of it again")

    async def tail_job_logs(self, job_id):
        for chunk in ("line 1\n", "line 2\n"):
            yield chunk


def test_submit_run_hands_ray_only_the_staged_files_and_streams_logs(checkout, monkeypatch, capsys):
    client = _Client()
    monkeypatch.setattr(submit, "make_client", lambda address, token=None: client)
    cfg = submit.SubmitConfig(working_dir=str(checkout), wait=True, follow=True, timeout_s=10)
    assert submit.submit_run(["--preset", "cpu-tiny"], cfg) == "job-1"
    assert client.uploaded == sorted(SOURCE)
    assert capsys.readouterr().out == "line 1\nline 2\n"


@pytest.fixture(autouse=True)
def no_address_in_the_environment(monkeypatch):
    """Ray's client reads these in place of its argument; each test sets them itself when it means to."""
    for name in submit.ADDRESS_OVERRIDES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("address", ["http://10.0.0.5:8265", "http://ray.example.com:8265", "HTTP://10.0.0.5"])
def test_token_is_never_sent_in_clear_text_to_another_host(address):
    with pytest.raises(ValueError, match="clear text"):
        submit.check_token_transport(address, "tok")
    with pytest.raises(ValueError, match="clear text"):
        submit.make_client(address, "tok")


@pytest.mark.parametrize("address", ["head:8265", "127.0.0.1:6379", "ray://127.0.0.1:10001", "ws://1.2.3.4", "auto"])
def test_a_token_goes_only_to_an_http_url(address):
    """Ray resolves these forms itself (a GCS lookup, a Ray Client address) to a URL this check would never see."""
    with pytest.raises(ValueError, match="not an http:// or https:// URL"):
        submit.make_client(address, "tok")


@pytest.mark.parametrize(
    "address", ["http://127.0.0.1:8265", "http://localhost:8265", "http://[::1]:8265", "https://ray.example.com:8265"]
)
def test_token_may_go_to_loopback_or_over_https(address):
    submit.check_token_transport(address, "tok")
    submit.check_token_transport("http://10.0.0.5:8265", None)  # no token, nothing to protect


@pytest.mark.parametrize(
    "address",
    [
        "http://evil.example\\@127.0.0.1:8265",
        "http://evil.example@127.0.0.1:8265",
        "http://user:pw@127.0.0.1:8265",
        "http://127.0.0.1 .evil.example:8265",
        "http://127.0.0.1:8265\n",
        "http://127.0.0.1\t:8265",
    ],
)
def test_addresses_the_http_client_reads_otherwise_are_refused(address):
    """urlsplit and urllib3 (requests, Ray's Jobs client) must agree on the host before a token is sent."""
    from urllib3.util import parse_url

    if "\\" in address:  # the attack: this check's parser sees loopback, the real client another host
        assert urlsplit(address).hostname == "127.0.0.1" and parse_url(address).host == "evil.example"
    with pytest.raises(ValueError, match="not a cluster address|user info|HTTP client"):
        submit.check_token_transport(address, "tok")
    with pytest.raises(ValueError):
        submit.make_client(address, "tok")


def test_links_to_secrets_or_outside_files_are_never_uploaded(checkout, tmp_path):
    (tmp_path / "home_netrc").write_text("machine x password y")
    (checkout / "docs").mkdir()
    (checkout / "docs" / "notes.txt").symlink_to(tmp_path / "home_netrc")  # tracked link to a file outside
    (checkout / "docs" / "model.txt").symlink_to(checkout / "model.pt")  # tracked link to weights
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "docs"], check=True)
    subprocess.run(git + ["commit", "-qm", "links"], check=True)
    assert submit.upload_files(submit.SubmitConfig(working_dir=str(checkout))) == sorted(SOURCE)
    (checkout / "extra" / "creds.txt").symlink_to(checkout / ".ssh" / "id_rsa")
    with pytest.raises(ValueError, match="creds.txt is a link to a path matching"):
        submit.upload_files(submit.SubmitConfig(working_dir=str(checkout), includes=["extra"]))
    (checkout / "extra" / "creds.txt").unlink()
    (checkout / "extra" / "out.txt").symlink_to(tmp_path / "home_netrc")
    with pytest.raises(ValueError, match="out.txt is a link to a file outside"):
        submit.upload_files(submit.SubmitConfig(working_dir=str(checkout), includes=["extra"]))


TRACKED_BY_MISTAKE = [
    ".envrc",
    ".config/gcloud/application_default_credentials.json",
    "service-account.json",
    "prod-sa-key.json",
    ".huggingface/token",
    ".cache/huggingface/token",
    ".npmrc",
    ".pgpass",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".htpasswd",
    "kubeconfig",
    "keys/signing.asc",
    "secring.gpg",
    "putty.ppk",
    "store.jks",
    "cert.pfx",
    "cert.der",
    "deploy_key",
    "sshkey",
    "api_keys.txt",
    "terraform.tfstate",
    "token.json",
    "passwords.txt",
    "key.json",
    "sa.json",
    "htpasswd.txt",
    "jwt.txt",
    "vault.yml",
    "data/features.npy",
    "data/model.h5",
    "data/state.msgpack",
    "data/model.joblib",
    "logs/events.out.tfevents.1700000000.host",
    "mlruns/0/meta.yaml",
    "results/metrics.jsonl",
]


def test_an_allow_list_keeps_tracked_secrets_and_weights_home_and_dry_run_lists_the_upload(checkout, capsys):
    """Every file of this list, committed by mistake, stays home: only source, configs, docs and data kinds go."""
    for rel in TRACKED_BY_MISTAKE:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("secret")
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "-f", *TRACKED_BY_MISTAKE], check=True)
    subprocess.run(git + ["commit", "-qm", "oops"], check=True)
    assert submit.upload_files(submit.SubmitConfig(working_dir=str(checkout))) == sorted(SOURCE)
    code = submit.submit_main(["--working-dir", str(checkout), "--dry-run", "--", "--preset", "cpu-tiny"])
    out = capsys.readouterr().out
    assert code == 0 and f"would upload {len(SOURCE)} file(s)" in out and "runner.kind=ray" in out
    assert all(f"  {rel}\n" in out for rel in SOURCE) and not any(f"  {rel}\n" in out for rel in TRACKED_BY_MISTAKE)


# ------------------------------------------------------------------ the real Ray client against a fake Jobs API
class _JobsAPI:
    """A loopback HTTP server answering what Ray's JobSubmissionClient asks (version, package upload, submit); it
    records each request's method, path, Authorization header and body."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        import ray

        requests: list[dict] = []
        self.requests = requests

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: dict | None = None) -> None:
                data = json.dumps(body or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "body": self.rfile.read(length) if length else b"",
                    }
                )

            def do_GET(self):
                self._record()
                if self.path.endswith("/api/version"):
                    self._answer(200, {"version": "4", "ray_version": ray.__version__, "ray_commit": "x"})
                else:
                    self._answer(404)

            def do_PUT(self):
                self._record()
                self._answer(200)

            def do_POST(self):
                self._record()
                self._answer(200, {"job_id": "raysubmit_fake", "submission_id": "raysubmit_fake"})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jobs_api():
    pytest.importorskip("ray")
    servers: list[_JobsAPI] = []

    def start() -> _JobsAPI:
        servers.append(_JobsAPI())
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _uploaded_files(package: bytes) -> list[str]:
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(package)) as archive:
        return sorted(n for n in archive.namelist() if not n.endswith("/"))


def test_the_real_ray_client_uploads_exactly_the_allowed_files_and_sends_the_token_only_there(checkout, jobs_api):
    for rel in TRACKED_BY_MISTAKE:
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("secret")
    git = ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "-f", *TRACKED_BY_MISTAKE], check=True)
    subprocess.run(git + ["commit", "-qm", "oops"], check=True)
    api = jobs_api()
    cfg = submit.SubmitConfig(address=api.url, auth_token="T0KEN", working_dir=str(checkout))
    assert submit.submit_run(["--preset", "cpu-tiny"], cfg) == "raysubmit_fake"
    assert [r["method"] for r in api.requests][-2:] == ["PUT", "POST"]
    assert all(r["auth"] == "Bearer T0KEN" for r in api.requests)
    assert _uploaded_files(api.requests[-2]["body"]) == sorted(SOURCE)
    job = json.loads(api.requests[-1]["body"])
    assert job["entrypoint"].endswith("--preset cpu-tiny runner.kind=ray")


def test_an_address_the_real_client_reads_otherwise_gets_neither_job_nor_token(jobs_api):
    """urlsplit reads the host after the backslash's '@'; Ray's client (requests, urllib3) connects to the one
    before it. Unguarded, the other server gets the token; through make_client nobody does."""
    from ray.job_submission import JobSubmissionClient

    checked, other = jobs_api(), jobs_api()
    address = f"http://127.0.0.1:{other.port}\\@127.0.0.2:{checked.port}"
    assert urlsplit(address).port == checked.port
    with pytest.raises(Exception):
        JobSubmissionClient(address, headers={"Authorization": "Bearer T0KEN"}).list_jobs()
    assert other.requests and other.requests[0]["auth"] == "Bearer T0KEN"  # the leak the guard closes
    other.requests.clear()
    with pytest.raises(ValueError, match="not a cluster address"):
        submit.make_client(address, "T0KEN")
    assert not other.requests and not checked.requests


def test_an_address_in_the_environment_never_redirects_the_job(jobs_api, monkeypatch):
    """Ray's client takes $RAY_ADDRESS over the address it is given: unguarded, --address X sends the token to Y."""
    from ray.job_submission import JobSubmissionClient

    asked, redirected = jobs_api(), jobs_api()
    monkeypatch.setenv("RAY_ADDRESS", redirected.url)
    JobSubmissionClient(asked.url, headers={"Authorization": "Bearer T0KEN"})
    assert redirected.requests and not asked.requests  # the redirect the guard closes
    redirected.requests.clear()
    with pytest.raises(ValueError, match="RAY_ADDRESS=.* uses instead"):
        submit.make_client(asked.url, "T0KEN")
    assert not redirected.requests and not asked.requests
    assert submit.make_client(redirected.url, "T0KEN") is not None  # the same address: fine


@pytest.mark.parametrize("rel", TRACKED_BY_MISTAKE)
def test_including_a_known_secret_or_weights_file_is_an_error(checkout, rel):
    """The allow-list keeps them home when tracked; named with --include, each is refused, not uploaded."""
    (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
    (checkout / rel).write_text("secret")
    with pytest.raises(ValueError, match="never uploaded"):
        submit.upload_files(submit.SubmitConfig(working_dir=str(checkout), includes=[rel]))

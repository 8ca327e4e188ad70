"""``mazegym submit``: send a training run to a Ray cluster through the Ray Jobs API.

The run itself is the Ray runner (:mod:`runners.distributed.ray_runner`) started on the cluster's head as
a Ray job; this module only builds the job's entrypoint and runtime environment, submits it
with :class:`ray.job_submission.JobSubmissionClient`, and optionally waits and streams logs::

    mazegym submit --address http://head:8265 --wait -- --preset qwen3-vl-8b-lora32 runner.num_workers=6

Everything after ``--`` is passed unchanged to ``mazegym train`` on the cluster, with
``runner.kind=ray`` appended (the job runs ``python -m runners.cli train ARGS runner.kind=ray``).

What is uploaded with ``--working-dir``: only the files git tracks there that are of an allowed
kind (source, configs, docs, data: :data:`UPLOAD_SUFFIXES`, :data:`UPLOAD_NAMES`), plus the paths
named with ``--include``, copied into a temporary directory that Ray packages; ``--dry-run``
prints the list. Secrets (``.env``, ``.ssh/``, ``.netrc``, ``.ray/``, ``wandb/``, keys,
credentials, tokens) and weights (``*.pt``, ``*.safetensors``, ``checkpoints/``, ``runs/``...) are
never uploaded, tracked or not (:data:`NEVER_UPLOAD`); ``--include`` of such a path is an error.

Authentication: Ray >= 2.5x clusters may require a token. It is taken, in order, from
``--auth-token``, ``$RAY_AUTH_TOKEN``, the file named by ``$RAY_AUTH_TOKEN_PATH`` and
``~/.ray/auth_token``, and sent as a bearer header -- only over https, or over http to this
machine (loopback); anything else is refused rather than sending the token in clear text. The
address is checked as Ray's client will use it: an ``http(s)://`` URL read as urllib3 reads it,
and never overridden by ``$RAY_API_SERVER_ADDRESS`` / ``$RAY_ADDRESS`` (a differing one is refused).
"""

from __future__ import annotations

import argparse
import fnmatch
import ipaddress
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Iterator
from urllib.parse import urlsplit
from pathlib import Path
from typing import Any

ENTRY = ("-m", "runners.cli", "train")
"""What the job runs after ``python``: ``mazegym train`` (``runner.kind=ray`` is appended to its arguments)."""

DEFAULT_EXCLUDES = [
    ".git",
    ".venv",
    ".venv*",
    "runs",
    "**/__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".hypothesis",
    ".benchmarks",
]
"""Paths never uploaded with the working directory (virtualenvs and run outputs are large)."""

NEVER_UPLOAD = [
    # secrets
    ".env*",
    "*.env",
    "secrets.*",
    "*secret*",
    ".ssh",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    "_netrc",
    ".ray",
    "auth_token",
    "wandb",
    ".aws",
    ".azure",
    ".gcloud",
    ".kube",
    ".docker",
    ".git-credentials",
    ".pypirc",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.der",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "*.asc",
    "*.gpg",
    "*.kdbx",
    ".npmrc",
    ".pgpass",
    ".s3cfg",
    ".boto",
    ".htpasswd",
    ".huggingface",
    "*deploy_key*",
    "*sshkey*",
    "*credentials*",
    "service-account*",
    "*-sa-key*",
    "*token*",
    "api_key*",
    "*password*",
    "*passwd*",
    "*jwt*",
    "key.json",
    "*_key.json",
    "*-key.json",
    "sa.json",
    "*vault*",
    "*.tfstate*",
    "kubeconfig*",
    "mlruns",
    ".git",
    # weights and run outputs
    "*.pt",
    "*.pth",
    "*.bin",
    "*.safetensors",
    "*.ckpt",
    "*.gguf",
    "*.onnx",
    "*.pkl",
    "*.pickle",
    "*.npz",
    "*.npy",
    "*.h5",
    "*.hdf5",
    "*.msgpack",
    "*.joblib",
    "events.out.tfevents.*",
    "metrics.jsonl",
    "checkpoints",
    "runs",
    "final_adapter",
    "adapter_sync",
]
"""Name patterns (matched against every component of a path) that are never uploaded, even when tracked or included."""

UPLOAD_SUFFIXES = (".py", ".pyi", ".toml", ".cfg", ".ini", ".md", ".rst", ".txt", ".yaml", ".yml", ".json", ".sh")
"""What a tracked file may be to be uploaded: source, configs, docs and data files (the eval sets are JSON). An
allow-list, so a tracked secret or weights file of a kind nobody listed (``.envrc``, ``.npmrc``, ``*.jks``, ``.npy``,
TensorBoard events, ``metrics.jsonl``, ...) stays home; ``--include`` adds other files explicitly."""
UPLOAD_NAMES = ("Dockerfile", "Makefile", "LICENSE", "NOTICE", "MANIFEST.in")
"""Tracked files uploaded by their whole name."""


def allowed_kind(relative: str) -> bool:
    """Whether a tracked file is of a kind :data:`UPLOAD_SUFFIXES` / :data:`UPLOAD_NAMES` uploads."""
    name = Path(relative).name
    return name in UPLOAD_NAMES or (not name.startswith(".") and Path(name).suffix.lower() in UPLOAD_SUFFIXES)


@dataclass
class SubmitConfig:
    """Where and how to submit a run."""

    address: str = "http://127.0.0.1:8265"
    """Ray dashboard / Jobs API address of the cluster head (KubeRay: the head service, port 8265)."""
    working_dir: str | None = None
    """Local directory uploaded as the job's working directory (e.g. "." for a source checkout);
    None runs the code installed in the cluster's image."""
    excludes: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDES))
    """Glob patterns left out of the working-directory upload."""
    pip: list[str] = field(default_factory=list)
    """Extra pip requirements installed for the job (Ray runtime_env ``pip``)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables for the job's driver and all its workers."""
    includes: list[str] = field(default_factory=list)
    """Paths under ``working_dir`` uploaded even though git does not track them (never secrets or weights)."""
    submission_id: str | None = None
    """Job id to use (must be unique on the cluster); None lets Ray choose one."""
    auth_token: str | None = None
    """Ray cluster auth token; None looks in $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token."""
    wait: bool = False
    """Block until the job finishes, then return its final status."""
    timeout_s: float = 24 * 3600.0
    """With ``wait``: give up waiting after this many seconds (the job keeps running)."""
    follow: bool = False
    """With ``wait``: print the job's log lines while it runs."""


def build_entrypoint(train_args: list[str], python: str = "python") -> str:
    """Shell command the job runs: ``mazegym train ARGS runner.kind=ray``, safely quoted."""
    return shlex.join([python, *ENTRY, *train_args, "runner.kind=ray"])


def build_runtime_env(cfg: SubmitConfig) -> dict[str, Any]:
    """Ray ``runtime_env`` for the job: working dir (with excludes), pip extras, env vars."""
    runtime_env: dict[str, Any] = {}
    if cfg.working_dir is not None:
        path = Path(cfg.working_dir).expanduser().resolve()
        if not path.is_dir():
            raise FileNotFoundError(
                f"working_dir {cfg.working_dir!r} is not a directory; pass a source checkout or None"
            )
        runtime_env["working_dir"] = str(path)
        runtime_env["excludes"] = list(cfg.excludes)
    if cfg.pip:
        runtime_env["pip"] = list(cfg.pip)
    env = {"PYTHONUNBUFFERED": "1", **cfg.env}
    runtime_env["env_vars"] = env
    return runtime_env


def never_upload(relative: str) -> str | None:
    """The :data:`NEVER_UPLOAD` pattern that ``relative`` (a path inside the working dir) matches, or None."""
    for part in Path(relative).parts:
        for pattern in NEVER_UPLOAD:
            if fnmatch.fnmatch(part.lower(), pattern):
                return pattern
    return None


def link_problem(root: Path, relative: str) -> str | None:
    """Why ``root/relative`` may not be uploaded although its own name is fine: it is a link to a place outside
    ``root``, or to a path :data:`NEVER_UPLOAD` matches (the upload copies what a link points to). None when it may."""
    real = (root / relative).resolve()
    if not real.is_relative_to(root):
        return "is a link to a file outside the working dir"
    pattern = never_upload(real.relative_to(root).as_posix())
    return f"is a link to a path matching {pattern!r}" if pattern is not None else None


def tracked_files(directory: Path) -> list[str]:
    """Files git tracks under ``directory`` (relative paths); ``ValueError`` when it is not in a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(directory), "ls-files", "-z", "--cached"], capture_output=True, check=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ValueError(
            f"working_dir {directory} is not inside a git checkout ({exc}); only tracked files are "
            f"uploaded, so submit from a checkout (add untracked files with --include)"
        ) from exc
    return [name for name in out.stdout.decode().split("\0") if name]


def upload_files(cfg: SubmitConfig) -> list[str]:
    """The relative paths uploaded as the working dir: tracked files of an allowed kind (:func:`allowed_kind`) plus
    ``cfg.includes``, minus secrets and weights (:data:`NEVER_UPLOAD`).

    An include that is missing, outside the working dir, or matches :data:`NEVER_UPLOAD` raises ``ValueError``.
    """
    root = Path(cfg.working_dir).expanduser().resolve()
    chosen = {
        name
        for name in tracked_files(root)
        if (root / name).is_file()
        and allowed_kind(name)
        and never_upload(name) is None
        and link_problem(root, name) is None
    }
    for include in cfg.includes:
        path = (root / include).resolve()
        if not path.is_relative_to(root) or not path.exists():
            raise ValueError(f"--include {include!r} is not a file or directory under {root}")
        names = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for name in names:
            rel = name.relative_to(root).as_posix()
            pattern = never_upload(rel)
            problem = f"matches {pattern!r}" if pattern is not None else link_problem(root, rel)
            if problem is not None:
                raise ValueError(
                    f"--include {include!r}: {rel} {problem}, which is never uploaded "
                    f"(secrets and weights stay on this machine)"
                )
            chosen.add(rel)
    return sorted(chosen)


@contextmanager
def staged_working_dir(cfg: SubmitConfig) -> Iterator[SubmitConfig]:
    """``cfg`` with ``working_dir`` replaced by a temporary copy of exactly :func:`upload_files` (removed after)."""
    if cfg.working_dir is None:
        yield cfg
        return
    root = Path(cfg.working_dir).expanduser().resolve()
    if not root.is_dir():
        raise FileNotFoundError(f"working_dir {cfg.working_dir!r} is not a directory; pass a source checkout or None")
    files = upload_files(cfg)
    with tempfile.TemporaryDirectory(prefix="mazegym-submit-") as staging:
        for rel in files:
            target = Path(staging) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, target)
        yield replace(cfg, working_dir=staging)


def parse_address(address: str) -> tuple[str, str]:
    """``(scheme, host)`` of a Jobs API address, as the HTTP client that will connect reads it.

    Python's ``urlsplit`` and urllib3 (under requests, Ray's client) disagree on some strings:
    for ``http://evil.example\\@127.0.0.1:8265`` the first reads host 127.0.0.1 and the second
    connects to evil.example. Backslashes, whitespace, control characters and user info have no
    place in a cluster address, so they are refused (``ValueError``), and so is any address whose
    host the two parsers read differently.
    """
    url = address if "://" in address else f"http://{address}"
    bad = sorted({repr(c) for c in url if c == "\\" or c.isspace() or ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ValueError(f"--address {address!r} contains {', '.join(bad)}: not a cluster address")
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise ValueError(f"--address {address!r} holds user info (before '@'): give the host and port only")
    from urllib3.util import parse_url

    theirs = (parse_url(url).host or "").lower().strip("[]")
    host = (parts.hostname or "").lower()
    if theirs != host:
        raise ValueError(f"--address {address!r} is read as host {host!r} here but {theirs!r} by the HTTP client")
    return parts.scheme, host


ADDRESS_OVERRIDES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
"""Environment variables that Ray's Jobs client reads in place of the address it is given, in its order."""


def client_address(address: str) -> str:
    """The address Ray's :class:`JobSubmissionClient` will connect to when given ``address``; ``ValueError`` when
    it is not the one given: the client takes ``$RAY_API_SERVER_ADDRESS`` (else ``$RAY_ADDRESS``) over its
    argument, so a stale variable would send the job, and the token, somewhere ``--address`` does not say."""
    for name in ADDRESS_OVERRIDES:
        value = os.environ.get(name)
        if value:
            if value.rstrip("/") != address.rstrip("/"):
                raise ValueError(
                    f"--address {address!r}, but ${name}={value!r} in the environment, which Ray's Jobs client uses "
                    f"instead; unset {name} or pass the same address"
                )
            break
    return address


def check_token_transport(address: str, token: str | None) -> None:
    """Refuse (``ValueError``) to send ``token`` over plain http to a host other than this machine.

    With a token the address must be an ``http://`` or ``https://`` URL: Ray's client resolves any other form (a
    bare ``host:port`` is a GCS address there, ``ray://`` a Ray Client one) to a dashboard URL this check never sees.
    """
    if token and not address.lower().startswith(("http://", "https://")):
        raise ValueError(
            f"--address {address!r} is not an http:// or https:// URL: Ray would look up the Jobs API address itself, "
            "and the auth token would go wherever that lookup says; give the head's dashboard URL "
            "(https://HOST:8265, or http://127.0.0.1:8265 through a tunnel)"
        )
    scheme, host = parse_address(address)
    if not token or scheme == "https":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(
            f"refusing to send the Ray auth token in clear text over {scheme}:// to {host!r}; "
            f"use an https:// address, or tunnel the dashboard port to 127.0.0.1"
        )


def find_auth_token(explicit: str | None = None) -> str | None:
    """The cluster auth token from the argument, the environment or ``~/.ray/auth_token``."""
    if explicit:
        return explicit.strip()
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    for candidate in (os.environ.get("RAY_AUTH_TOKEN_PATH"), str(Path.home() / ".ray" / "auth_token")):
        if candidate and Path(candidate).is_file():
            return Path(candidate).read_text().strip() or None
    return None


def make_client(address: str, auth_token: str | None = None):
    """A :class:`JobSubmissionClient` for ``address``, sending the auth token when one exists."""
    token = find_auth_token(auth_token)
    check_token_transport(client_address(address), token)
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return JobSubmissionClient(address, headers=headers)
    except ConnectionError as exc:
        raise ConnectionError(
            f"cannot reach the Ray Jobs API at {address!r} ({exc}); check --address (the head's "
            "dashboard port, 8265 by default) and that the dashboard is running"
        ) from exc


def submit_run(train_args: list[str], cfg: SubmitConfig | None = None) -> str:
    """Submit a Ray-runner training run; returns the job's submission id.

    With ``cfg.wait`` it also waits for the job to finish and raises ``RuntimeError`` if it
    failed (the message holds the tail of its logs).
    """
    cfg = cfg or SubmitConfig()
    client = make_client(cfg.address, cfg.auth_token)
    with staged_working_dir(cfg) as staged:  # Ray packages the upload inside submit_job
        job_id = client.submit_job(
            entrypoint=build_entrypoint(train_args),
            runtime_env=build_runtime_env(staged),
            submission_id=cfg.submission_id,
            metadata={"launcher": "mazegym submit"},
        )
    if cfg.wait:
        status = wait_for_job(client, job_id, cfg.timeout_s, follow=cfg.follow)
        if status != "SUCCEEDED":
            tail = client.get_job_logs(job_id)[-3000:]
            raise RuntimeError(f"job {job_id} ended {status}; last log lines:\n{tail}")
    return job_id


def wait_for_job(client: Any, job_id: str, timeout_s: float, follow: bool = False, poll_s: float = 1.0) -> str:
    """Poll until job ``job_id`` reaches a terminal state; returns it ("SUCCEEDED", "FAILED", ...).

    With ``follow`` the log is streamed as it grows (each line sent once), not re-downloaded.
    Raises ``TimeoutError`` after ``timeout_s`` (the job is left running).
    """
    deadline = time.monotonic() + timeout_s
    if follow:
        stream_logs(client, job_id, deadline)
    while True:
        status = client.get_job_status(job_id)
        if status.is_terminal():
            return str(status.value)
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {status.value} after {timeout_s:.0f} s (it keeps running)")
        time.sleep(poll_s)


def stream_logs(client: Any, job_id: str, deadline: float) -> None:
    """Print job ``job_id``'s log lines as Ray sends them (``tail_job_logs``) until it ends or ``deadline``."""
    import asyncio

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            sys.stdout.write(chunk)
            sys.stdout.flush()

    try:
        asyncio.run(asyncio.wait_for(tail(), timeout=max(0.1, deadline - time.monotonic())))
    except asyncio.TimeoutError:
        pass


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Arguments of ``mazegym submit``; pass an existing (sub)parser to fill it in."""
    p = parser or argparse.ArgumentParser(prog="mazegym submit", description=__doc__.split("\n\n")[0])
    d = SubmitConfig()
    default_address = next((os.environ[n] for n in ADDRESS_OVERRIDES if os.environ.get(n)), d.address)
    p.add_argument(
        "--address",
        default=default_address,
        help=f"Ray Jobs API URL of the cluster head (default: $RAY_API_SERVER_ADDRESS, $RAY_ADDRESS, {d.address})",
    )
    p.add_argument(
        "--working-dir",
        default=None,
        help="upload this directory as the job's working dir (default: use the image's install)",
    )
    p.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="PATH",
        help="with --working-dir: also upload this untracked file or directory (repeatable; never secrets or weights)",
    )
    p.add_argument("--pip", action="append", default=[], help="extra pip requirement for the job (repeatable)")
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="environment variable for the job (repeatable)"
    )
    p.add_argument("--submission-id", default=None, help="job id (unique on the cluster)")
    p.add_argument("--auth-token", default=None, help="Ray auth token (default: $RAY_AUTH_TOKEN or ~/.ray/auth_token)")
    p.add_argument("--wait", action="store_true", help="wait for the job to finish; exit 1 if it failed")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the files --working-dir would upload and the entrypoint; send nothing",
    )
    p.add_argument("--follow", action="store_true", help="with --wait: stream the job's logs")
    p.add_argument("--timeout-s", type=float, default=d.timeout_s, help="with --wait: stop waiting after this long")
    p.add_argument(
        "train_args", nargs=argparse.REMAINDER, help="after --: arguments for mazegym train (runner.kind=ray is added)"
    )
    return p


def config_from_args(ns: argparse.Namespace) -> tuple[SubmitConfig, list[str]]:
    """Turn parsed arguments into a :class:`SubmitConfig` plus the training arguments."""
    env = {}
    for item in ns.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--env expects KEY=VALUE, got {item!r}")
        env[key] = value
    train_args = list(ns.train_args)
    if train_args and train_args[0] == "--":
        train_args = train_args[1:]
    cfg = SubmitConfig(
        address=ns.address,
        working_dir=ns.working_dir,
        includes=ns.include,
        pip=ns.pip,
        env=env,
        submission_id=ns.submission_id,
        auth_token=ns.auth_token,
        wait=ns.wait,
        timeout_s=ns.timeout_s,
        follow=ns.follow,
    )
    return cfg, train_args


def run_submit_args(ns: argparse.Namespace) -> int:
    """Submit from parsed arguments; prints the job id (exit code 0) or the error (exit code 1)."""
    cfg, train_args = config_from_args(ns)
    if getattr(ns, "dry_run", False):
        try:
            files = upload_files(cfg) if cfg.working_dir is not None else []
        except (ValueError, FileNotFoundError) as exc:
            print(f"mazegym submit: {exc}", file=sys.stderr)
            return 1
        print(f"entrypoint: {build_entrypoint(train_args)}")
        print(f"would upload {len(files)} file(s) from {cfg.working_dir}:" if cfg.working_dir else "no working dir")
        print("\n".join(f"  {f}" for f in files))
        return 0
    try:
        job_id = submit_run(train_args, cfg)
    except (RuntimeError, TimeoutError, ConnectionError, FileNotFoundError, ValueError) as exc:
        print(f"mazegym submit: {exc}", file=sys.stderr)
        return 1
    print(job_id)
    return 0


def submit_main(argv: list[str] | None = None) -> int:
    """Entry point of ``mazegym submit`` / ``python -m runners.distributed.submit``: parse ``argv`` and submit."""
    return run_submit_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(submit_main())

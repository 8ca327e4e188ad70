"""Run ``mazegym`` with one function wrapped to SIGKILL the process on its N-th call (test-only fault injection).

    python tests/reliability/crash_harness.py --kill MODULE:ATTR --at N --when before|after \
        [--anchor MODULE:ATTR --anchor-at K] -- train --run-dir R ...

``MODULE:ATTR`` names a module-level function (``runners.local:update_step``) or a method
(``runners.train.sync:AdapterSync.publish``). On its ``N``-th call the process kills itself with
SIGKILL, ``before`` calling the original or ``after`` it returned: no handler, ``finally`` or
flush runs, as when the machine loses the process. With ``--anchor``, calls of the target are
counted only once the anchor has been called ``K`` times (e.g. the 2nd generate call of step
2's rollout). Without ``--kill`` the run is not touched (the reference run). Everything after
``--`` goes to :func:`runners.cli.main`. Nothing here changes production code: the wrapping
exists only in this process.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Any


def resolve(spec: str) -> tuple[Any, str]:
    """``(owner, attribute name)`` of ``MODULE:ATTR[.ATTR]`` (the owner is a module or a class)."""
    module, _, path = spec.partition(":")
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    if not callable(getattr(owner, name, None)):
        raise SystemExit(f"crash_harness: {spec} is not a function")
    return owner, name


def wrap(spec: str, before: Callable[[], None], after: Callable[[], None]) -> None:
    """Replace ``spec`` with a wrapper calling ``before()``, the original, then ``after()``."""
    owner, name = resolve(spec)
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before()
        result = original(*args, **kwargs)
        after()
        return result

    setattr(owner, name, wrapper)


def arm(target: str, at: int, when: str, anchor: str | None = None, anchor_at: int = 0) -> None:
    """Make the ``at``-th call of ``target`` (counted after the ``anchor_at``-th anchor call) SIGKILL this process."""
    counts = {"target": 0, "anchor": 0 if anchor else anchor_at}

    def kill(moment: str) -> None:
        sys.stderr.write(f"crash_harness: SIGKILL {moment} call {at} of {target}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def before() -> None:
        if counts["anchor"] < anchor_at:
            return
        counts["target"] += 1
        if counts["target"] == at and when == "before":
            kill("before")

    def after() -> None:
        if counts["anchor"] >= anchor_at and counts["target"] == at and when == "after":
            kill("after")

    if anchor:
        wrap(anchor, lambda: counts.__setitem__("anchor", counts["anchor"] + 1), lambda: None)
    wrap(target, before, after)


def main(argv: list[str]) -> int:
    """Parse the harness options, arm the kill, run ``mazegym`` with the rest."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kill", help="MODULE:ATTR to wrap (omit for an untouched run)")
    parser.add_argument("--at", type=int, default=1, help="kill on this call of the target (1 = first)")
    parser.add_argument("--when", choices=("before", "after"), default="before")
    parser.add_argument("--anchor", help="MODULE:ATTR whose calls start the count")
    parser.add_argument(
        "--anchor-at", type=int, default=1, help="count target calls once the anchor ran this many times"
    )
    split = argv.index("--")
    options = parser.parse_args(argv[:split])
    if options.kill:
        arm(options.kill, options.at, options.when, options.anchor, options.anchor_at)
    from runners.cli import main as mazegym

    return mazegym(argv[split + 1 :])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""How a command's failure reaches the user: one line on stderr and an exit code, not a traceback.

Exit codes: 2 for a config error or a refused input (a file, a value, a missing optional package), 1 when the input
ended before the command finished, 130 after Ctrl-C (handled by :func:`runners.cli.main`). Anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import sys

REPORTED_ERRORS = {
    "runners.train.sync": "AdapterSyncError",
    "runners.train.run_lock": "RunDirBusy",
    "runners.train.checkpoint": "CheckpointWriteError",
}
"""The runners' own errors that :func:`report` prints as one line, by module."""


def reported_errors() -> tuple[type[BaseException], ...]:
    """The error types :func:`report` prints as one line: file and value errors, and :data:`REPORTED_ERRORS` of the
    modules the command loaded.

    Looked up when an error arrives rather than imported up front: those modules load torch, which would make every
    command (``--help`` included) pay for it, and an error of a module the command never loaded cannot have been raised.
    """
    loaded = [getattr(sys.modules[m], name) for m, name in REPORTED_ERRORS.items() if m in sys.modules]
    return (FileNotFoundError, FileExistsError, ValueError, *loaded)


def report(command: str, exc: Exception) -> int | None:
    """Print ``exc`` as ``mazegym COMMAND: ...`` on stderr and return the exit code; None for an error that is not
    the user's to fix (the caller re-raises it)."""
    from runners.config import ConfigError

    if isinstance(exc, ConfigError):
        return _say(f"mazegym {command}: config error: {exc}", 2)
    if isinstance(exc, KeyError):
        return _key_error(command, exc)
    if isinstance(exc, reported_errors()):
        return _say(f"mazegym {command}: error ({type(exc).__name__}): {exc}", 2)
    if isinstance(exc, ModuleNotFoundError):
        from runners.config.plan import INSTALL_HINTS

        module = (exc.name or "").split(".")[0]
        if module not in INSTALL_HINTS:
            return None
        return _say(
            f"mazegym {command}: error: this needs {module}, which is not installed here: {INSTALL_HINTS[module]}", 2
        )
    if isinstance(exc, EOFError):
        return _say(f"mazegym {command}: the input ended (EOF) before the command finished", 1)
    if isinstance(exc, RecursionError):
        return _say(
            f"mazegym {command}: error: a file this command read is nested too deeply to be one mazegym wrote "
            "(a damaged or hostile JSON file?); rerun the step that wrote it",
            2,
        )
    return None


def _key_error(command: str, exc: KeyError) -> int:
    key = exc.args[0] if exc.args else "?"
    if isinstance(key, str) and " " in key:  # a lookup that explains itself (an unknown name and the choices)
        return _say(f"mazegym {command}: error: {key}", 2)
    return _say(
        f"mazegym {command}: error (KeyError): missing key {key!r} in data this command read; the file is "
        f"probably from another mazegym version or damaged: rerun the step that wrote it",
        2,
    )


def _say(line: str, code: int) -> int:
    print(line, file=sys.stderr)
    return code

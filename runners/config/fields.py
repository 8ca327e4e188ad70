"""The one check of each key: read from its field's metadata, wherever the field is declared.

Every field of every settings dataclass (the generic sections, each part's settings, LoRA's) carries exactly one of
``range`` (``(low, high, low excluded)``, None = unbounded; the value must also be a finite number), ``choices``
(the allowed values), ``check`` (``fn(value)`` returns the problem in words, or None) or ``any`` (any value of its
type: the typed merge has checked that), or is a section (a nested dataclass). ``algo.params`` is checked by the
algorithm's own config class. Rules across keys live with the part that owns them (:mod:`runners.config.validation`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterator

from runners.config.schema import ConfigError

VALIDATORS = ("range", "choices", "check", "any")
"""The metadata keys that check a field."""


def settings(config: Any, prefix: str = "") -> Iterator[tuple[str, Any, dataclasses.Field]]:
    """(dotted key, value, field) of every setting in ``config``, sections walked (provenance and the algorithm's
    settings left out)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("provenance") or f.metadata.get("algorithm"):
            continue
        if dataclasses.is_dataclass(value):
            yield from settings(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value, f


def validators(f: dataclasses.Field) -> list[str]:
    """The checks field ``f`` declares (exactly one for every setting)."""
    return [name for name in VALIDATORS if name in f.metadata]


def problem(value: Any, f: dataclasses.Field) -> str | None:
    """What is wrong with ``value`` for field ``f`` (None when nothing is)."""
    if "range" in f.metadata:
        return _out_of_range(value, *f.metadata["range"])
    if "choices" in f.metadata:
        allowed = f.metadata["choices"]
        return None if value in allowed else f"is not allowed; choose one of {', '.join(map(str, allowed))}"
    if "check" in f.metadata:
        return f.metadata["check"](value)
    return None


def _out_of_range(value: Any, low: float | None, high: float | None, low_open: bool) -> str | None:
    """The problem with ``value`` for a numeric range (a finite number inside it), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a number"
    if isinstance(value, float) and not math.isfinite(value):
        return "is not a finite number"
    too_low = low is not None and (value <= low if low_open else value < low)
    if not too_low and (high is None or value <= high):
        return None
    lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
    hi = "" if high is None else f"<= {high:g}" if isinstance(high, float) else f"<= {high:_}"
    return f"is out of range: it must be {' and '.join(p for p in (lo, hi) if p)}"


def check_fields(config: Any) -> None:
    """Check every setting of ``config`` by its field's one check; ConfigError naming the first key that fails."""
    for key, value, f in settings(config):
        found = problem(value, f)
        if found:
            raise ConfigError(f"{key}={value!r} {found}")

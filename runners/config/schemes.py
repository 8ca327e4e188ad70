"""The rollout scheme of a run, chosen to fit its algorithm: choosing an algorithm is one setting.

Every algorithm lists the rollout schemes it trains on (``algos.rollout_schemes(name)``: ``episodes``, whole plays
from a maze's start, and/or ``branching``, one-move branches from every open cell). A preset picks a scheme for its
own algorithm; when the user names another algorithm that cannot train on it, :func:`resolve_scheme` moves the run to
the algorithm's scheme, together with the settings that belong to the scheme, and returns one line saying so. A
run's scheme is its collector's (``runners.rollout.collectors``). A scheme the user chose (``rollout.branching`` or
``rollout.collector`` in a config file or an override) is never changed: validation then names the conflict and the
fix.
"""

from __future__ import annotations

from typing import Any, Collection

from runners.config.overrides import _get, set_value
from runners.config.schema import TrainConfig
from runners.rollout import collectors

SCHEME_NAMES = {"episodes": "episode plays", "branching": "branching rollouts"}
"""Each scheme in words."""

SCHEME_SETTINGS: dict[str, dict[str, Any]] = {
    "episodes": {"rollout.branching": False, "loop.overlap_generation": False},
    "branching": {"rollout.branching": True, "rollout.history": "none", "algo.old_logprobs": "recompute"},
}
"""What a run moved to each scheme sets. Overlapped collection needs branch scoring, which draws no random numbers;
branches are one-turn episodes scored, not sampled (no history, no sampling log-probs)."""

BRANCHING_ALGO_SETTINGS = ("skip_zero_advantage", "filter_zero_variance")
"""Algorithm settings a preset turns on for branching batches, where most turns and groups carry no signal; a run
moved to episode plays returns them to the algorithm's own defaults (a critic learns from every turn of every play)."""


def scheme_of(config: TrainConfig) -> str:
    """The rollout scheme ``config`` collects with (a name of ``algos.ROLLOUT_SCHEMES``): its collector's."""
    return collectors.of(config.rollout).scheme


def _current(config: TrainConfig, key: str) -> Any:
    """The value of dotted ``key``; an ``algo.<field>`` the config leaves unset reads as the algorithm's default."""
    if key.startswith("algo."):
        import algos

        field = key.removeprefix("algo.")
        return config.algo.params.get(field, getattr(algos.config_class(config.algo.name)(), field))
    return _get(config, key)


def flat_settings(nested: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping of settings (``{rollout: {temperature: 0.3}}``) as dotted keys (``rollout.temperature``)."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        if isinstance(value, dict) and value:
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def scheme_settings(config: TrainConfig, scheme: str) -> dict[str, Any]:
    """The settings that put ``config`` (with its algorithm) on ``scheme``: :data:`SCHEME_SETTINGS`, on episode
    plays the algorithm's own defaults of :data:`BRANCHING_ALGO_SETTINGS`, then the config's own
    ``scheme_settings[scheme]`` (a preset's tuning for the scheme it does not use itself)."""
    settings = dict(SCHEME_SETTINGS[scheme])
    if scheme == "episodes":
        import algos

        defaults = algos.config_class(config.algo.name)()
        settings.update({f"algo.{name}": getattr(defaults, name) for name in BRANCHING_ALGO_SETTINGS})
    settings.update(flat_settings(config.scheme_settings.get(scheme, {})))
    return settings


def resolve_scheme(config: TrainConfig, base: str, explicit: Collection[str]) -> str | None:
    """Put ``config`` on a rollout scheme its algorithm trains on; returns the line saying what changed, else None.

    ``base`` is the scheme the config started with (the preset's, or a saved run's) and ``explicit`` the dotted keys
    the user set (config files and ``key=value`` overrides; :func:`~runners.config.overrides.override_keys`). Unless
    the user set ``rollout.branching`` or ``rollout.collector``, an algorithm that cannot train on the current scheme
    moves to the first scheme it lists. Whenever the scheme differs from ``base`` (moved here or by the user), the
    settings of the new scheme (:func:`scheme_settings`) are applied, except those the user set: validation reports
    any that conflict.
    """
    import algos

    if config.algo.name not in algos.available():
        return None  # validation names the registered algorithms
    try:
        scheme, moved = scheme_of(config), False
    except ValueError:
        return None  # validation names the registered collectors
    supported = algos.rollout_schemes(config.algo.name)
    if scheme not in supported and not {"rollout.branching", "rollout.collector"} & set(explicit):
        scheme, moved = supported[0], True
    if scheme == base or scheme not in supported:  # not in supported: the user's choice, which validation refuses
        return None
    changed = []
    for key, value in scheme_settings(config, scheme).items():
        if key not in explicit and _current(config, key) != value:
            set_value(config, key, value)
            changed.append(f"{key}={_word(value)}")
    if not changed:
        return None
    if moved:
        return (
            f"algo.name={config.algo.name} trains on {SCHEME_NAMES[scheme]} only: {' '.join(changed)} "
            "(set rollout.branching to choose the scheme yourself)"
        )
    return f"{SCHEME_NAMES[scheme]} (rollout.branching={_word(scheme == 'branching')}) also set: {' '.join(changed)}"


def _word(value: Any) -> str:
    """``value`` as it is written on the command line."""
    return str(value).lower() if isinstance(value, bool) else str(value)

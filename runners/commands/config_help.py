"""The config keys a config-taking command's ``--help`` lists, with the values of the chosen preset."""

from __future__ import annotations

import textwrap

COMMON_EPILOG = "Config keys (KEY=VALUE overrides; values shown for preset {preset}):\n"


def config_keys_epilog(argv: list[str]) -> str:
    """The epilog of a config-taking command's --help: every key, its value under the ``--preset`` of ``argv`` (or
    the default preset) and its help; one line saying why when they cannot be listed (an unknown preset)."""
    try:
        return fields_help(preset_from_argv(argv))
    except Exception as exc:  # an unknown --preset: the command itself reports it
        return f"(config keys unavailable: {exc})"


def fields_help(preset: str) -> str:
    """Every config key of ``preset`` with its value and help, grouped by section."""
    from runners.config import describe_fields
    from runners.config.presets import get_preset

    rows = describe_fields(get_preset(preset))
    out = [COMMON_EPILOG.format(preset=preset)]
    section = None
    for key, value, doc in rows:
        head = key.split(".")[0] if "." in key else ""
        if head != section:
            section = head
            out.append(f"\n  [{head or 'run'}]")
        out.append(f"  {key} = {value}")
        if doc:
            out.append(textwrap.fill(doc, width=100, initial_indent="      ", subsequent_indent="      "))
    out.append(
        "\n  algo.<field>: any hyperparameter of the chosen algorithm, e.g. algo.lr, algo.clip_eps_high,"
        "\n      algo.kl_coef, algo.entropy_coef (see `mazegym presets --algo grpo`)."
    )
    return "\n".join(out)


def preset_from_argv(argv: list[str]) -> str:
    """The ``--preset`` named in ``argv`` (the default preset when none is)."""
    for i, a in enumerate(argv):
        if a == "--preset" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--preset="):
            return a.split("=", 1)[1]
    from runners.config.presets import DEFAULT_PRESET

    return DEFAULT_PRESET

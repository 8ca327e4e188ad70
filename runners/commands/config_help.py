"""The config keys a config-taking command's ``--help`` lists: :func:`runners.config.help.keys_help`."""

from __future__ import annotations


def config_keys_epilog(argv: list[str]) -> str:
    """The epilog of a config-taking command's --help: the keys of the config ``argv`` describes, grouped by the part
    that owns them (every part's with ``--help-all``)."""
    from runners.config.help import keys_help
    from runners.config.presets import DEFAULT_PRESET

    return keys_help(argv, DEFAULT_PRESET)

"""Runners: generation, rollouts, adapter sync, SFT, the local and Ray training loops, the commands and the CLI.

Importing ``runners`` (or ``runners.config``, or building the CLI) loads neither torch nor transformers: the modules
that load a model import them, and :mod:`algos.models` (which registers mazegym's own models with the transformers
Auto classes) comes with the one loader they go through.
"""

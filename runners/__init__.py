"""Runners: generation, rollouts, adapter sync, SFT, the local and Ray training loops, the CLI."""

import algos.models  # noqa: F401  (registers mazegym's own models, e.g. MazeVLM, with the transformers Auto classes)

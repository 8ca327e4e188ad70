"""Shared pytest setup. Keep it small: fixtures belong in the test files that use them."""

import os

# Keep torch and BLAS from oversubscribing the 2-core CI machines.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

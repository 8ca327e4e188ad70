#!/usr/bin/env bash
# Install everything from the repo's own files, then run the test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
.venv/bin/ruff check .             # lint rules in pyproject.toml ([tool.ruff.lint])
.venv/bin/ruff format --check .    # the formatter ([tool.ruff.format])
exec .venv/bin/pytest -q "$@"

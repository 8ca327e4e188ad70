#!/usr/bin/env bash
# Install, then run the main job: the CPU default training run (SFT then GRPO, tiny model).
set -euo pipefail
cd "$(dirname "$0")/.."
MAZEGYM_NO_RAY=1 bash scripts/install.sh
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/mazegym train "$@"

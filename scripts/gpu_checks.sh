#!/usr/bin/env bash
# Every GPU check in one command, for a machine with one CUDA GPU (and none of the project's installs).
#
#   bash scripts/gpu_checks.sh [OUT_DIR]        # OUT_DIR defaults to $OUT, else ./gpu_check_out
#
# 1. When ./.whl holds wheels (the pinned gymnasium, pettingzoo, transformers, peft, tokenizers,
#    omegaconf, ... that the machine lacks), installs them with pip --no-deps into $MAZEGYM_WHEEL_SITE
#    (default /tmp/site) and puts that folder first on PYTHONPATH; skipped when they are already
#    there, or with MAZEGYM_GPU_CHECK_NO_INSTALL=1.
# 2. Runs two lanes side by side, each script under its own `timeout`:
#      lane A: scripts/gpu_check.py (environment, hf backend on images, LoRA sync parity, vLLM steps)
#              then scripts/gpu_ray_check.py (FSDP2 over NCCL at world size 1, vLLM sleep, Ray runner)
#      lane B: scripts/gpu_train_check.py (`mazegym train` / `eval` / `report` on the default preset with
#              model.device=cuda, the Qwen3-VL preset on a tiny random Qwen3-VL in bf16, the MazeVLM preset)
#    Without a GPU the same scripts run what they can on the CPU and skip the rest (a rehearsal).
# 3. Writes OUT_DIR/summary.json (every step of every script, plus what was not carried and why) and
#    OUT_DIR/summary.txt (this script's log and the table). With the scripts' own files OUT_DIR holds
#    8 files: summary.{json,txt}, gpu_check.{json,log}, gpu_ray_check.json, gpu_train_check.{json,log},
#    report.html (lane A's log holds both of its scripts).
# Always exits 0: the results are in the files. Expected wall time on an H200: about 2-3 minutes, at most
# LANE_B_TIMEOUT (210 s) plus a few seconds; the time limits can be set through the environment.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 0
OUT_DIR="${1:-${OUT:-$ROOT/gpu_check_out}}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"
SITE="${MAZEGYM_WHEEL_SITE:-/tmp/site}"
LANE_A_TIMEOUT="${LANE_A_TIMEOUT:-180}"   # gpu_check.py gets 55% of it, gpu_ray_check.py the rest
LANE_B_TIMEOUT="${LANE_B_TIMEOUT:-210}"
CHILD_TIMEOUT="${CHILD_TIMEOUT:-100}"     # each child process of gpu_train_check.py
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
log() { echo "[gpu_checks $(date +%H:%M:%S)] $*" | tee -a "$SUMMARY"; }

NOT_CARRIED="vllm: not carried (the GPU wheel vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64 is 311.4 MiB, over the 64 MiB a check may carry); ray: not carried (ray-2.60.0-cp312-cp312-manylinux2014_x86_64 is 75.6 MiB, over the same limit)"

# ---------------------------------------------------------------- 1. wheels
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ "${MAZEGYM_GPU_CHECK_NO_INSTALL:-0}" != 1 ]; then
  missing=0
  for whl in .whl/*.whl; do
    prefix="$(basename "$whl" | cut -d- -f1-2)"
    ls "$SITE" 2>/dev/null | grep -qix "${prefix}.dist-info" || missing=1
  done
  if [ "$missing" = 1 ]; then
    log "installing $(ls .whl/*.whl | wc -l) wheels into $SITE"
    t0=$(date +%s)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl 2>&1 \
      | tail -5 | tee -a "$SUMMARY"
    log "pip install took $(( $(date +%s) - t0 )) s"
  else
    log "wheels already installed in $SITE"
  fi
  case ":${PYTHONPATH:-}:" in *":$SITE:"*) ;; *) export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}" ;; esac
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
export OUT="$OUT_DIR" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
log "python: $("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1), PYTHONPATH=$PYTHONPATH, OUT=$OUT_DIR"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader \
  2>&1 | tee -a "$SUMMARY"
log "$NOT_CARRIED"

# ---------------------------------------------------------------- 2. the lanes
t_start=$(date +%s)
(
  timeout -k 5 "$(( LANE_A_TIMEOUT * 55 / 100 ))" "$PY" scripts/gpu_check.py --out "$OUT_DIR" \
    --budget-s "$(( LANE_A_TIMEOUT * 55 / 100 - 30 ))"
  echo "[gpu_checks] gpu_check.py exit code $?"
  left=$(( LANE_A_TIMEOUT - ($(date +%s) - t_start) ))
  [ "$left" -lt 30 ] && left=30
  timeout -k 5 "$left" "$PY" scripts/gpu_ray_check.py --json "$OUT_DIR/gpu_ray_check.json" \
    --fsdp-timeout "$(( left - 15 ))" --no-fail-exit
  echo "[gpu_checks] gpu_ray_check.py exit code $?"
) > "$OUT_DIR/gpu_check.log" 2>&1 &
lane_a=$!
(
  timeout -k 5 "$LANE_B_TIMEOUT" "$PY" scripts/gpu_train_check.py --out "$OUT_DIR" --timeout "$CHILD_TIMEOUT"
  echo "[gpu_checks] gpu_train_check.py exit code $?"
) > "$OUT_DIR/gpu_train_check.log" 2>&1 &
lane_b=$!
log "lane A (gpu_check.py, gpu_ray_check.py) pid $lane_a, lane B (gpu_train_check.py) pid $lane_b; running side by side"
wait "$lane_a"; log "lane A done after $(( $(date +%s) - t_start )) s"
wait "$lane_b"; log "lane B done after $(( $(date +%s) - t_start )) s"

# ---------------------------------------------------------------- 3. summary
NOT_CARRIED="$NOT_CARRIED" "$PY" - "$OUT_DIR" <<'EOF' 2>&1 | tee -a "$SUMMARY"
import json, os, sys
from pathlib import Path

out = Path(sys.argv[1])
rows, merged = [], {"not_carried": os.environ.get("NOT_CARRIED", "")}
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError) as exc:
        return {"missing": f"{name}: {exc}"}
for name in ("gpu_check.json", "gpu_ray_check.json", "gpu_train_check.json"):
    data = merged[name.removesuffix(".json")] = load(name)
    if isinstance(data, dict) and "missing" in data:
        rows.append(("MISSING", name, 0.0, data["missing"]))
        continue
    items = data if isinstance(data, list) else [{"step": k, **v} for k, v in data.items()]
    for r in items:
        detail = r.get("detail") or r.get("reason") or "; ".join(r.get("problems") or []) or r.get("headline") or ""
        if not detail:
            detail = json.dumps({k: v for k, v in r.items() if k not in ("step", "status", "seconds", "traceback", "output_tail")},
                                default=str)
        lines = str(detail).splitlines()
        rows.append((r.get("status", "?"), f"{name.removesuffix('.json')}:{r.get('step')}", r.get("seconds", 0) or 0,
                     " | ".join(lines) if r.get("step") == "environment" else (lines[0] if lines else "")))
(out / "summary.json").write_text(json.dumps({"rows": [dict(zip(("status", "step", "seconds", "detail"), r)) for r in rows],
                                              **merged}, indent=2, default=str))
print("\n=== summary (lanes ran side by side: seconds include that contention) ===")
for status, step, seconds, detail in rows:
    print(f"{status:7s} {step:42s} {float(seconds):7.1f}s  {detail if 'environment' in step else detail[:300]}")
counts = {s: sum(1 for r in rows if r[0] == s) for s in sorted({r[0] for r in rows})}
print("counts:", counts)
EOF
log "total $(( $(date +%s) - t_start )) s after install; files in $OUT_DIR: $(ls "$OUT_DIR" | tr '\n' ' ')"
exit 0

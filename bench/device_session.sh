#!/usr/bin/env bash
# One session on a lent GPU for issue 33: the smoke window, the step table, and what time leaves.
#
#   bash bench/device_session.sh             # on the device, from the repository root; $OUT is set there
#   bash bench/device_session.sh --dry-run   # on a CPU, tiny sizes: every stage's code path (docs/gpu.md)
#
# The device has Python 3.12 with torch, transformers 5.17, tokenizers, safetensors, numpy and rich, but not
# bittensor, pydantic or zstandard: their wheels travel in .whl (name it in `carry`) and go to $SITE first,
# with transformers 5.24 (the nodes use `activation_checkpointing_enable`, which 5.17 does not have).
# Stages run in priority order, each under `timeout` (SIGTERM first: the local network stops its nodes, a
# benchmark keeps the rows it wrote) and each within what is left of BUDGET_S, so one failing or slow
# stage does not stop the next; a stage that cannot get its least time is skipped and the summary says so.
#
#   1. smoke: `distrai localnet --device cuda --run.config distrai/configs/gpu-smoke.toml`, 2 miners and
#      1 validator on the GPU for 3 windows, data from this Python's standard library (a BPE of 50,257
#      tokens), the miners keeping 2 of each window's 3 states (a challenged one dropped is rebuilt); meanwhile, in the background and one at a time, the step table's compiled steps are
#      compiled and trained in fresh processes (`bench/gpu.py --end-hash`, 8 compile threads: the network's
#      nodes use about 3 cores), so stage 2 need not wait for them.
#   2. steps: `bench/gpu.py --step-table` on 150m: the GPU config's step, its atomic-free forms (eager;
#      compiled with and without deterministic algorithms) and the target, each repeated, and whether the
#      fresh processes' compiles gave the same bits.
#   2b. boundaries: `bench/boundaries.py --device cuda` on 150m: the training thread's time per boundary
#      inline and with the boundary worker, and host memory over the boundaries (boundaries.md).
#   3. reveal (optional slot): `bench/reveal_size.py --device cuda --preset 150m` (its table to reveal.md),
#      only if that file exists (it came from another branch).
#   4. profile: `bench/gpu.py --profile --profiled-only` on 150m: where each step's time goes.
#   5. 1b: the same loops' throughput on the 1b preset.
#
# What comes back under $OUT (at most 7 files): summary.md (the machine, and each stage's exit code,
# seconds and cap), smoke.md (the smoke window's report: docs/gpu.md's table), steps.md (the step table),
# boundaries.md (the boundary bench),
# reveal.md (the optional stage's table), throughput.md (profile and 1b tables), logs.txt (each stage's
# log trimmed, and the tail of every node's log).
set -u

DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-$ROOT/.whl}
SITE=${SITE:-/tmp/site}
BUDGET=${BUDGET_S:-465}
if [ "$DRY" = 1 ]; then OUT=${OUT:-/tmp/device-session-dry}; else OUT=${OUT:?OUT must name the folder whose files come back}; fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [ "$DRY" = 1 ]; then
  SCALE=${CAP_SCALE:-4}  # a CPU compiles several times slower than the device's 16 cores: every cap is longer
  DEVICE=cpu
  SMOKE_CONFIG=tests/support/gpu-smoke-cpu.toml
  BLOCK_TIME=0.5
  SIZES=(--quick --device cpu)
  BIG=(--device cpu --presets tiny --rows 4 --seq-len 32 --micro-batches 2 --steps 2)
  REVEAL=(--quick --device cpu)
else
  SCALE=${CAP_SCALE:-1}
  DEVICE=cuda
  SMOKE_CONFIG=distrai/configs/gpu-smoke.toml
  BLOCK_TIME=1
  SIZES=(--presets 150m --steps 5 --replay-steps 2)
  BIG=(--presets 1b --steps 3)
  REVEAL=(--device cuda --preset 150m)
fi

# scratch: the smoke network's folder holds up to about 45 GB of 150m states at once (each miner's boundary
# states of a window, 7.2 GB, and the revealed ones, 3.35 GB a window each); in memory (/dev/shm) when it
# has 50 GB free, else wherever has the most room
avail() { df --output=avail -B1G "$1" 2>/dev/null | tail -n 1 | tr -d ' '; }
SCRATCH=${SCRATCH:-}
if [ -z "$SCRATCH" ]; then
  SCRATCH=/tmp
  if [ "$DRY" = 0 ] && [ "$(avail /dev/shm || echo 0)" -ge "$(avail /tmp || echo 0)" ] 2>/dev/null; then SCRATCH=/dev/shm; fi
  if [ "$DRY" = 0 ] && [ "$(avail /dev/shm || echo 0)" -ge 50 ] 2>/dev/null; then SCRATCH=/dev/shm; fi
fi
WORK="$SCRATCH/distrai-session"
rm -rf "$WORK"
mkdir -p "$WORK/logs" "$WORK/fresh"
SUMMARY="$OUT/summary.md"

{
  echo "# Device session ($( [ "$DRY" = 1 ] && echo "dry run on a CPU" || echo "GPU"), $(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "| stage | exit code | seconds | cap |"
  echo "|---|---|---:|---:|"
} > "$SUMMARY"

left() { echo $((BUDGET - SECONDS)); }

# stage NAME CAP LEAST COMMAND...: run COMMAND under `timeout`, at most CAP seconds (times SCALE) and what is
# left of the budget; skipped when less than LEAST seconds (times SCALE) are left. Its log goes to
# $WORK/logs/NAME.log.
stage() {
  local name=$1 cap=$(($2 * SCALE)) least=$(($3 * SCALE)) rest
  shift 3
  rest=$(left)
  if [ "$rest" -lt "$least" ]; then
    echo "| $name | skipped: ${rest} s left, it needs ${least} | – | – |" >> "$SUMMARY"
    echo ">>> $name skipped (${rest} s left)"
    return 0
  fi
  [ "$cap" -gt "$rest" ] && cap=$rest
  local began=$SECONDS
  echo ">>> [$(date +%T)] $name: cap ${cap} s, ${rest} s left"
  timeout --kill-after=30 "$cap" "$@" > "$WORK/logs/$name.log" 2>&1
  local rc=$?
  local note=""
  [ "$rc" = 124 ] && note=" (cut at its cap)"
  echo "| $name | ${rc}${note} | $((SECONDS - began)) | $cap |" >> "$SUMMARY"
  echo ">>> $name: exit ${rc}${note} after $((SECONDS - began)) s"
  tail -n 4 "$WORK/logs/$name.log"
}

trim() {  # the first 5 and the last N lines of a log
  local file=$1 n=$2
  [ -f "$file" ] || return 0
  echo "=== $file"
  if [ "$(wc -l < "$file")" -le $((n + 5)) ]; then cat "$file"; else head -n 5 "$file"; echo "[…]"; tail -n "$n" "$file"; fi
}

machine() {  # what ran it, once the wheels are in
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c 'import sys, torch, transformers, tokenizers
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)' 2>&1
  echo "cpus $(nproc); scratch $WORK"
  df -h "$SCRATCH" /tmp 2>/dev/null | sed 1d
  free -g 2>/dev/null | sed -n 2p
  echo '```'
}

finish() {
  machine >> "$SUMMARY"
  {
    for log in "$WORK"/logs/*.log; do trim "$log" 60; done
    for node in "$WORK"/smoke/logs/*.log; do
      [ -f "$node" ] || continue
      echo "=== $node: warnings and errors (first 20)"
      grep -E "WARNING|ERROR|Error|Traceback" "$node" | head -n 20
      trim "$node" 25
    done
  } > "$OUT/logs.txt" 2>&1
  rm -f "$OUT/throughput.md"
  for table in "$WORK/profile.md" "$WORK/tp1b.md"; do [ -f "$table" ] && cat "$table" >> "$OUT/throughput.md"; done
  echo ">>> session done in ${SECONDS} s; files in $OUT:"
  ls -la "$OUT"
}
trap finish EXIT

# 0. wheels (bittensor, pydantic and what they need), unless this Python has them already
if "$PY" -c 'import bittensor, pydantic, zstandard' 2>/dev/null; then
  echo "| wheels | already installed | 0 | – |" >> "$SUMMARY"
else
  stage wheels 90 10 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
fi
stage imports 60 10 "$PY" -c 'import distrai.cli, distrai.localnet.command, miners.miner, validators.validator; print("imports ok")'

# 1. the smoke window, with the step table's fresh-process compiles beside it (only when the step table
# will have its least time: a short budget skips it, and the compiles would only hold the cores)
STEPS_LEAST=90
FRESH_JOB=""
if [ "$(left)" -ge $((STEPS_LEAST * SCALE)) ]; then
  read -r -a FRESH <<< "$("$PY" -c 'import sys; sys.path.insert(0, "bench")
from _gpu_loops import EVERY_LOOP, KERNELS_COMPILED, KERNELS_INDUCTOR
print(EVERY_LOOP.index(KERNELS_COMPILED), EVERY_LOOP.index(KERNELS_INDUCTOR))' 2>/dev/null)"
  (
    for loop in "${FRESH[@]}"; do
      TORCHINDUCTOR_COMPILE_THREADS=8 timeout 420 "$PY" bench/gpu.py --end-hash "$loop" "${SIZES[@]}" \
        > "$WORK/fresh/$loop.out" 2>&1 &
      echo $! > "$WORK/fresh.pid"
      wait $! && mv "$WORK/fresh/$loop.out" "$WORK/fresh/$loop.txt"
    done
  ) &
  FRESH_JOB=$!
fi

STDLIB=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
mapfile -t TEXT < <(ls "$STDLIB"/*.py 2>/dev/null)
if [ "${#TEXT[@]}" -lt 50 ]; then mapfile -t TEXT < <(find distrai bench docs -name '*.py' -o -name '*.md' | sort); fi
[ "$DRY" = 1 ] && TEXT=("${TEXT[@]:0:40}")
# The miners keep 2 of a window's 3 states, so a challenge of segment 1 reveals a state rebuilt on a second
# model beside the training (miners/rebuild.py), which the validator's replay must match bit for bit.
DISTRAI_MINER_KEPT_STATES=2 stage smoke 300 150 "$PY" -m distrai.cli localnet --device "$DEVICE" --run.config "$SMOKE_CONFIG" --miners 2 \
  --validators 1 --windows 3 --block-time "$BLOCK_TIME" --work "$WORK/smoke" --data.files "${TEXT[@]}"
if [ -d "$WORK/smoke" ]; then  # the network ran (a skipped stage leaves no folder, and no report)
  cp "$WORK/smoke/report.md" "$OUT/smoke.md" 2>/dev/null \
    || "$PY" -m distrai.cli localnet --report "$WORK/smoke" > "$OUT/smoke.md" 2>> "$WORK/logs/smoke.log"
fi

# 2. the step table (the fresh processes' outputs read from $WORK/fresh once they are done)
while [ -n "$FRESH_JOB" ] && kill -0 "$FRESH_JOB" 2>/dev/null && [ "$(left)" -gt 200 ]; do sleep 2; done
if [ -n "$FRESH_JOB" ] && kill -0 "$FRESH_JOB" 2>/dev/null; then  # out of time: the step table starts what did not finish itself
  kill "$FRESH_JOB" 2>/dev/null
  kill "$(cat "$WORK/fresh.pid")" 2>/dev/null
  wait "$FRESH_JOB" 2>/dev/null
fi
stage steps 330 "$STEPS_LEAST" "$PY" bench/gpu.py --step-table "${SIZES[@]}" --fresh-hashes "$WORK/fresh" --output "$OUT/steps.md"
for f in "$WORK"/fresh/*.txt "$WORK"/fresh/*.out; do [ -f "$f" ] && cp "$f" "$WORK/logs/fresh-$(basename "$f").log"; done

# 2b. the boundaries off the training thread, 150m on the GPU: the copy into page-locked buffers (issue 44)
if [ "$DRY" = 1 ]; then BOUNDS=(--quick); else BOUNDS=(--device cuda --boundaries 4 --inline-boundaries 2 --segment-seconds 20); fi
stage boundaries 200 120 "$PY" bench/boundaries.py "${BOUNDS[@]}" --output "$OUT/boundaries.md"

# 3. optional slot: the lean reveal's sizes, from another branch (runs only once bench/reveal_size.py exists)
if [ -f bench/reveal_size.py ]; then
  stage reveal 120 90 "$PY" bench/reveal_size.py "${REVEAL[@]}" --output "$OUT/reveal.md"
else
  echo "| reveal (optional) | not run: no bench/reveal_size.py in this tree | – | – |" >> "$SUMMARY"
fi

# 4. where the time goes, 150m; 5. the 1b preset's throughput
if [ "$DRY" = 1 ]; then PROFILE=(--quick --device cpu); else PROFILE=(--presets 150m --steps 4 --profile); fi
stage profile 200 100 "$PY" bench/gpu.py --throughput-only --profiled-only "${PROFILE[@]}" --output "$WORK/profile.md"
stage 1b 240 180 "$PY" bench/gpu.py --throughput-only --profiled-only "${BIG[@]}" --output "$WORK/tp1b.md"

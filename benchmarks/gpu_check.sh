#!/usr/bin/env bash
# The GPU check in one command: the GPU's state (nvidia-smi), then benchmarks/gpu_check.py under an 8-minute cap.
#
#   bash benchmarks/gpu_check.sh /tmp/gpu_check.json            # one H200: Qwen3-4B shapes, random weights
#   bash benchmarks/gpu_check.sh /tmp/gc.json --shapes=tiny     # arguments after the JSON path go to the script
#
# Prints the table of decode tok/s (and fraction of the bandwidth bound), judge verdicts/s, LoRA step s and MFU,
# compiled memory; writes them to OUT.json (default bench_out/gpu_check.json). The script keeps to its own
# 420 s budget; the timeout is the backstop (the JSON then marks the interrupted leg). Exits with the script's
# status: 0, 1 when a leg failed, 124 when the timeout stopped it. PYTHON picks the interpreter.
set -u
cd "$(dirname "$0")/.."
out="${1:-bench_out/gpu_check.json}"
[ $# -gt 0 ] && shift
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi
else
  echo "nvidia-smi: not found (no NVIDIA driver here; the check runs on whatever JAX finds)"
fi
timeout -k 20 480 "${PYTHON:-python}" benchmarks/gpu_check.py --out="$out" "$@"
status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "gpu_check: stopped by the 8-minute timeout; $out holds what finished" >&2
fi
exit "$status"

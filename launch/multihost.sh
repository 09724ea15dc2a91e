#!/usr/bin/env bash
# Multi-host launch (jax.distributed): one process per host, started on every host with its own index.
#   COORDINATOR=host0:1234 NUM_HOSTS=2 HOST_ID=0 bash launch/multihost.sh /ckpt/Qwen3-8B /runs/rcrl
# Status: the trainer initialises jax.distributed and then stops with a clear NotImplementedError, because
# assembling the per-host prompt batches into global arrays is not built yet. Use gpu_host.sh (one host,
# all its GPUs) until then.
set -euo pipefail
ckpt=${1:?checkpoint dir}; workdir=${2:?workdir}; config=${3:-configs/rcrl.py}
cd "$(dirname "$0")/.."
exec python3 -m rubric_jax.main --config="$config" --workdir="$workdir" --config.model="$ckpt" \
  --distributed --coordinator_address="${COORDINATOR:?host:port}" --num_processes="${NUM_HOSTS:?}" \
  --process_id="${HOST_ID:?}"

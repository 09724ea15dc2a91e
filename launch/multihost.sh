#!/usr/bin/env bash
# Multi-host launch (jax.distributed): one process per host, started on every host with its own index.
#
#   COORDINATOR=host0:1234 NUM_HOSTS=2 HOST_ID=0 bash launch/multihost.sh /ckpt/Qwen3-8B /runs/rcrl   # on host 0
#   COORDINATOR=host0:1234 NUM_HOSTS=2 HOST_ID=1 bash launch/multihost.sh /ckpt/Qwen3-8B /runs/rcrl   # on host 1
#
# Under SLURM (srun, one task per node), on a TPU pod or on Kubernetes (JobSet) leave COORDINATOR,
# NUM_HOSTS and HOST_ID unset: jax.distributed finds them itself. Every process must see the same
# workdir (a shared filesystem or a bucket path orbax can write) and the same checkpoint. MESH defaults to
# "data:<all devices>" (one slice per host); e.g. MESH=data:2,fsdp:8 shards weights over each host's 8 GPUs.
# Extra arguments after the config are passed through (e.g. --config.steps=100).
# Resume: run the same command again; every process restores the latest checkpoint in the workdir.
# See docs/architecture.md, "Many hosts".
set -euo pipefail
ckpt=${1:?checkpoint dir}; workdir=${2:?workdir}; config=${3:-configs/rcrl.py}
shift $(( $# < 3 ? $# : 3 ))
cd "$(dirname "$0")/.."
args=(--config="$config" --workdir="$workdir" --config.model="$ckpt" --distributed)
[[ -n "${MESH:-}" ]] && args+=(--config.mesh="$MESH")
if [[ -n "${COORDINATOR:-}" ]]; then
  args+=(--coordinator_address="$COORDINATOR" --num_processes="${NUM_HOSTS:?}" --process_id="${HOST_ID:?}")
fi
exec python3 -m rubric_jax.main "${args[@]}" "$@"

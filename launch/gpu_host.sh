#!/usr/bin/env bash
# One GPU host (e.g. 1-8 H100/H200): RcRL at paper scale on a Qwen3 checkpoint.
#   bash launch/gpu_host.sh /ckpt/Qwen3-4B /runs/rcrl [configs/rcrl.py] [extra --config.* overrides]
# The checkpoint is a Hugging Face directory (config.json + *.safetensors). With several GPUs the model is
# sharded over them: MESH defaults to fsdp over every local device.
set -euo pipefail
ckpt=${1:?checkpoint dir}; workdir=${2:?workdir}; config=${3:-configs/rcrl.py}; shift $(( $# < 3 ? $# : 3 ))
cd "$(dirname "$0")/.."
python3 -c "import jax; assert jax.default_backend() == 'gpu', 'no GPU: pip install -U \"jax[cuda12]\"'" 
ndev=$(python3 -c "import jax; print(jax.local_device_count())")
mesh=${MESH:-$([ "$ndev" -gt 1 ] && echo "fsdp:$ndev" || echo "")}
# Let XLA take most of the GPU memory up front; the judge and sampler reuse the same buffers.
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
exec python3 -m rubric_jax.main --config="$config" --workdir="$workdir" \
  --config.model="$ckpt" --config.mesh="$mesh" "$@"

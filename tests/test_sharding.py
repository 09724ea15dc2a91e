"""Sharded forward on a 2x4 mesh of 8 forced CPU devices equals the single-device forward."""

import json
import os
import subprocess
import sys

from jax.sharding import PartitionSpec

from rubric_jax.models.sharding import logical_to_spec


def _run_check(script_name, ckpt):
    """Runs a check script in a fresh process (8 forced CPU devices) and returns its JSON result."""
    script = os.path.join(os.path.dirname(__file__), script_name)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, script, ckpt], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_sharded_forward_matches_single_device(tiny_qwen3):
    res = _run_check("sharded_forward_check.py", tiny_qwen3[0])
    assert res["devices"] == 8
    assert res["max_diff"] <= 1e-5
    # Weights really are split: heads over tensor, model dim over fsdp, vocab over tensor.
    assert res["q_proj"] == str(PartitionSpec("fsdp", "tensor", None))
    assert res["embed"] == str(PartitionSpec("tensor", "fsdp"))
    assert res["down"] == str(PartitionSpec("tensor", "fsdp"))


def test_logical_rules_drop_axes_that_do_not_divide():
    class FakeMesh:  # logical_to_spec reads only .shape; no need for 8 real devices here
        shape = {"data": 2, "tensor": 4}

    fake = FakeMesh()
    assert logical_to_spec(("embed", "kv_heads", "head_dim"), (64, 2, 32), fake) == PartitionSpec(None, None, None)
    assert logical_to_spec(("embed", "heads", "head_dim"), (64, 4, 32), fake) == PartitionSpec(None, "tensor", None)
    assert logical_to_spec(("batch", "seq"), (6, 10), fake) == PartitionSpec("data", None)
    assert logical_to_spec(("batch", "seq"), (5, 10), fake) == PartitionSpec(None, None)


def test_sharded_train_step_matches_single_device(tiny_qwen3):
    res = _run_check("sharded_train_check.py", tiny_qwen3[0])
    assert res["moved"] > 0
    assert res["max_diff"] <= 1e-5, res
    assert abs(res["loss"][0] - res["loss"][1]) <= 1e-5 and res["kl"][0] > 0

"""Sharded forward and GRPO update on a 2x4 mesh of 8 forced CPU devices equal the single-device ones; the session's
one 8-device subprocess for every mesh check (mesh_check)."""

import json
import os
import subprocess
import sys

import pytest
from jax.sharding import PartitionSpec

from rubric_jax.models.sharding import logical_to_spec


def _env():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    # the script's own directory is sys.path[0]: find this checkout's package whatever is installed
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


# Every 8-device check script of the suite (here, test_forward.py, test_judge_forward.py, test_doc_examples.py). mesh_context_check
# runs first: it checks a function jitted before any mesh was entered.
MESH_CHECKS = ("mesh_context_check", "sharded_forward_check", "sharded_train_check", "judge_mesh_check",
               "readme_mesh_check")


def mesh_check(tmp_path_factory, name, ckpt):
    """The JSON result of check script `name` (one of MESH_CHECKS) on the tiny checkpoint. All of them run once
    per session, in one subprocess with 8 forced CPU devices (tests/mesh_checks.py) shared by both xdist
    workers: one interpreter, jax import and device set-up instead of four. A check that raised fails the test
    that asked for it, with its traceback."""
    from conftest import shared_once

    def build(path):
        script = os.path.join(os.path.dirname(__file__), "mesh_checks.py")
        proc = subprocess.run([sys.executable, script, ckpt, os.path.join(path, "results.json"), *MESH_CHECKS],
                              capture_output=True, text=True, env=_env(), timeout=1800)
        assert proc.returncode == 0, proc.stderr[-3000:]

    path = shared_once(tmp_path_factory, "mesh_checks", build)
    with open(os.path.join(path, "results.json")) as f:
        res = json.load(f)[name]
    assert "error" not in res, res["error"]
    return res


# Where the (fsdp=2, tensor=4) mesh must put each weight, per logical axis (DEFAULT_RULES written out for the tiny
# model: 4 heads, 2 kv heads (tensor=4 does not divide 2: replicated), embed 64, mlp 128). A stacked "layers" axis,
# when the layout has one, is replicated.
FORWARD_PLACEMENT = {
    "embed_tokens/embedding": {"vocab": "tensor", "embed": "fsdp"},
    "self_attn/q_proj/kernel": {"embed": "fsdp", "heads": "tensor", "head_dim": None},
    "self_attn/k_proj/kernel": {"embed": "fsdp", "kv_heads": None, "head_dim": None},
    "self_attn/o_proj/kernel": {"heads": "tensor", "head_dim": None, "embed": "fsdp"},
    "mlp/gate_proj/kernel": {"embed": "fsdp", "mlp": "tensor"},
    "mlp/down_proj/kernel": {"mlp": "tensor", "embed": "fsdp"},
}
LORA_PLACEMENT = {
    "q_proj/base/kernel": {"embed": "fsdp", "heads": "tensor", "head_dim": None},
    "q_proj/lora_a": {"embed": "fsdp", "lora_rank": None},
    "q_proj/lora_b": {"lora_rank": None, "heads": "tensor", "head_dim": None},
    "k_proj/lora_b": {"lora_rank": None, "kv_heads": None, "head_dim": None},
    "down_proj/lora_a": {"mlp": "tensor", "lora_rank": None},
    "down_proj/lora_b": {"lora_rank": None, "embed": "fsdp"},
}


def _assert_placement(placement, wanted):
    """Every array sits where its logical axes say (actual .sharding.spec), and the named weights where the rules
    table puts them."""
    assert placement
    for path, p in placement.items():
        assert p["axes"] is not None and len(p["axes"]) == len(p["shape"]), path  # every weight is annotated
        assert p["actual"] == p["expected"], (path, p)
    for suffix, axis_map in wanted.items():
        hits = {path: p for path, p in placement.items() if path.endswith(suffix)}
        assert hits, f"no parameter named *{suffix} in {sorted(placement)}"
        for path, p in hits.items():
            want = {"layers": None, **axis_map} if "layers" in p["axes"] else axis_map
            assert dict(zip(p["axes"], p["actual"])) == want, (path, p)


@pytest.mark.slow
def test_sharded_forward_matches_single_device(tiny_qwen3, tmp_path_factory):
    res = mesh_check(tmp_path_factory, "sharded_forward_check", tiny_qwen3[0])
    assert res["devices"] == 8
    assert res["max_diff"] <= 1e-5
    # Weights really are split: heads over tensor, model dim over fsdp, vocab over tensor.
    assert res["q_proj"] == str(PartitionSpec(None, "fsdp", "tensor", None))  # stacked: layers replicated
    assert res["embed"] == str(PartitionSpec("tensor", "fsdp"))
    assert res["down"] == str(PartitionSpec(None, "tensor", "fsdp"))
    _assert_placement(res["placement"], FORWARD_PLACEMENT)


def test_logical_rules_drop_axes_that_do_not_divide():
    class FakeMesh:  # logical_to_spec reads only .shape; no need for 8 real devices here
        shape = {"data": 2, "tensor": 4}

    fake = FakeMesh()
    assert logical_to_spec(("embed", "kv_heads", "head_dim"), (64, 2, 32), fake) == PartitionSpec(None, None, None)
    assert logical_to_spec(("embed", "heads", "head_dim"), (64, 4, 32), fake) == PartitionSpec(None, "tensor", None)
    assert logical_to_spec(("batch", "seq"), (6, 10), fake) == PartitionSpec("data", None)
    assert logical_to_spec(("batch", "seq"), (5, 10), fake) == PartitionSpec(None, None)


@pytest.mark.slow
def test_sharded_train_step_matches_single_device(tiny_qwen3, tmp_path_factory):
    res = mesh_check(tmp_path_factory, "sharded_train_check", tiny_qwen3[0])
    # Both runs start from the same adapters, lora_b at zero as in training.
    assert res["init_diff"] == 0 and res["lora_b_init"] == 0
    assert res["num_lora_a"] == res["num_lora_b"] > 0
    # The step really moved the adapters (lora_b first, then lora_a in the second iteration), by far more than the
    # tolerance the two runs must agree to.
    for moved in res["moved_b"] + res["moved_a"]:
        assert moved >= 1e-4, res
    # The parameters after the step: mesh equals single device.
    assert res["max_diff"] <= 1e-5, res
    assert abs(res["loss"][0] - res["loss"][1]) <= 1e-5 and res["kl"][0] > 0
    _assert_placement(res["placement"], LORA_PLACEMENT)  # the adapters are placed by their axes, and stay there

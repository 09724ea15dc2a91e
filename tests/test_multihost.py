"""Multi-host training for real on one machine: processes on localhost joined by jax.distributed, with CPU
collectives (gloo), against one process holding all the devices.

2 processes x N devices must equal 1 process x 2N devices (N = 1 and 4): every logged non-time/ metric of
two steps, and the LoRA parameters; the run writes one checkpoint and one metrics file; a killed-and-restarted
2-process run continues exactly. The fast tests cover the pieces that do not need several processes.
"""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest

from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.hosts import Hosts, merge_rows
from rubric_jax.rl.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- fast: the single-process reductions and the pooling rules ------------------------------------------

def test_merge_rows_concatenates_in_process_order_and_checks_shared_settings():
    parts = [{"r": np.array([[1.0, 2.0]]), "h": [{"a": 1}], "w": 3},
             {"r": np.array([[3.0, 4.0]]), "h": [{"a": 2}], "w": 3}]
    merged = merge_rows(parts)
    np.testing.assert_array_equal(merged["r"], [[1, 2], [3, 4]])
    assert merged["h"] == [{"a": 1}, {"a": 2}] and merged["w"] == 3
    with pytest.raises(ValueError, match="disagree"):
        merge_rows([{"w": 3}, {"w": 4}])


def test_one_process_is_the_identity():
    hosts = Hosts(None)
    assert not hosts.multi and hosts.gather({"x": 1}) == [{"x": 1}]
    assert hosts.max(7) == 7
    x = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(hosts.local_rows(hosts.rows(x)), x)
    tree = {"w": jax.numpy.ones(3)}
    assert hosts.local(tree) is tree


def test_a_multi_process_run_needs_a_mesh_and_whole_data_slices():
    with pytest.raises(ValueError, match="needs a device mesh"):
        Hosts(None, index=0, count=2)
    from rubric_jax.models.sharding import make_mesh

    mesh = make_mesh({"fsdp": 1})  # no data axis
    with pytest.raises(ValueError, match="'data' axis"):
        Hosts(mesh, index=0, count=2)


# ---- slow: real processes ------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _launch(workdir, ckpt, mesh, devices, steps, cache, *, processes=1):
    """Starts the README's training command (tiny RcRL config) as 1 or 2 processes; returns their outputs."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
               TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "rubric_jax.main", "--config=configs/rcrl.py:tiny", f"--workdir={workdir}",
           f"--config.model={ckpt}", f"--config.mesh={mesh}", f"--config.steps={steps}",
           "--config.tensorboard=False", f"--config.compilation_cache_dir={cache}",
           # one criterion in both steps: the judge compiles once (the curriculum is tested elsewhere); one
           # completion width (the ladder of 8 has one rung): the update compiles once and the restart loads it
           "--config.reward.interval=100", "--config.max_completion_len=8"]
    port = _free_port()
    procs = []
    for pid in range(processes):
        extra = [] if processes == 1 else ["--distributed", f"--coordinator_address=localhost:{port}",
                                           f"--num_processes={processes}", f"--process_id={pid}"]
        procs.append(subprocess.Popen(cmd + extra, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append(out)
        assert p.returncode == 0, out[-4000:]
    return outs


def _lora(workdir, step):
    ckpt = Checkpointer(workdir)
    try:
        state, meta = ckpt.restore(step)
    finally:
        ckpt.close()
    flat = jax.tree_util.tree_flatten_with_path(state["lora"])[0]
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in flat}, meta


def _compare_runs(one, two):
    m1, m2 = read_metrics(one), read_metrics(two)
    assert [r["step"] for r in m1] == [r["step"] for r in m2] == [0, 1]  # one metrics line per step
    for r1, r2 in zip(m1, m2):
        keys = {k for k in r1 if not k.startswith("time/")}
        assert keys == {k for k in r2 if not k.startswith("time/")}
        for k in sorted(keys - {"step"}):
            # mismatch/logp_max holds rounding (about 1e-6: the sampler's and the update's sums of one
            # computation, which another device layout orders differently) on top of LoRA dropout's effect
            atol = 1e-5 if k == "mismatch/logp_max" else 1e-7
            assert np.isclose(r2[k], r1[k], rtol=1e-4, atol=atol), (r1["step"], k, r1[k], r2[k])
    # the update really moved the adapters, and both runs moved them the same way
    lora1, meta1 = _lora(one, 2)
    lora2, meta2 = _lora(two, 2)
    assert lora1.keys() == lora2.keys()
    assert max(np.abs(v).max() for k, v in lora1.items() if "lora_b" in k) > 0
    for k in lora1:
        np.testing.assert_allclose(lora2[k], lora1[k], rtol=1e-5, atol=1e-7, err_msg=k)
    assert meta1["data"] == meta2["data"]
    # written once: the checkpoint steps and nothing per process
    assert sorted(os.listdir(os.path.join(two, "checkpoints"))) == ["1", "2"]


# heavy, both shapes: five JAX process starts for data:2 (about 120 s on 2 cores), three on an 8-device mesh for
# data:2,fsdp:4 (about 150 s). CI runs what they rest on instead: the single-process kill-and-resume
# (test_trainer.py::test_resume_after_a_crash_equals_an_uninterrupted_run), the README command's resume in a new
# process (test_main_job.py), and the pooling of per-process rows below.
@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("n, mesh", [(1, "data:2"), (4, "data:2,fsdp:4")])
def test_two_processes_equal_one_process_with_all_devices(n, mesh, tiny_qwen3, tmp_path):
    """(data:2: the 1-process reference, the 2-process run stopped after step 1 and its restart; nothing less checks
    that processes joined by jax.distributed train as one and resume as one.)"""
    ckpt = tiny_qwen3[0]
    cache = str(tmp_path / "jax_cache")
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _launch(one, ckpt, mesh, 2 * n, 2, cache)
    if n == 1:
        # The 2-process run is stopped after step 1 and restarted: it must continue exactly.
        _launch(two, ckpt, mesh, n, 1, cache, processes=2)
        assert [r["step"] for r in read_metrics(two)] == [0]
        assert sorted(os.listdir(os.path.join(two, "checkpoints"))) == ["1"]
        outs = _launch(two, ckpt, mesh, n, 2, cache, processes=2)
        # the restart ran step 1 only (process 0 prints one progress line per step it runs)
        assert "step 1/2" in outs[0] and "step 0/2" not in outs[0], outs[0][-2000:]
    else:
        _launch(two, ckpt, mesh, n, 2, cache, processes=2)
    _compare_runs(one, two)
    with open(os.path.join(two, "config.json")) as f:
        assert json.load(f)["mesh"] == mesh


def test_metrics_of_pooled_halves_equal_the_metrics_of_the_whole_batch(qwen_tokenizer):
    """What each process contributes (per-row figures, padding counts, judge rows) pools into exactly the
    metrics of one process holding the whole batch."""
    from rubric_jax.rl import diagnostics, shapes
    from rubric_jax.methods.rcrl.reward import RewardConfig, judge_metrics
    from rubric_jax.rubrics import load_rubric
    from rubric_jax.sampling.sampler import SampleOutput

    rng = np.random.RandomState(0)
    g, lengths = 2, np.asarray([3, 9, 1, 5], np.int32)
    tokens = rng.randint(100, 2000, (4, 12)).astype(np.int32)
    tokens[1, 8] = qwen_tokenizer.eos_ids[0]  # one completion ends, three are cut off
    entropy = rng.rand(4, 12).astype(np.float32)
    pt = np.zeros((2, 8), np.int32)
    pm = np.zeros((2, 8), bool)
    pm[0, 5:], pm[1, 2:] = True, True
    whole = SampleOutput(tokens=tokens, lengths=lengths, logprobs=entropy * 0, entropy=entropy, prompt_tokens=pt,
                         prompt_mask=pm, num_samples=g)
    half = lambda i: SampleOutput(tokens=tokens[2 * i:2 * i + 2], lengths=lengths[2 * i:2 * i + 2],
                                  logprobs=entropy[2 * i:2 * i + 2] * 0, entropy=entropy[2 * i:2 * i + 2],
                                  prompt_tokens=pt[i:i + 1], prompt_mask=pm[i:i + 1], num_samples=g)
    prompts = ["Write a poem.", "Écris un poème."]
    texts = [qwen_tokenizer.decode(c) for c in whole.completions()]
    plan = shapes.ShapePlan(prompt_ladder=(8,), completion_ladder=(4, 8, 12), prompt_width=8)
    from rubric_jax.rl.trainer import rollout_batch

    def rows(out, ps, ts):
        batch = rollout_batch(out, np.zeros(out.tokens.shape[0], np.float32), plan, longest=9)
        return {"completion": diagnostics.completion_rows(out, ps, ts, qwen_tokenizer),
                "padding": shapes.padding_counts(out, batch)}

    pooled = merge_rows([rows(half(i), prompts[i:i + 1], texts[2 * i:2 * i + 2]) for i in range(2)])
    direct = rows(whole, prompts, texts)
    assert diagnostics.completion_metrics(pooled["completion"]) == diagnostics.completion_metrics(direct["completion"])
    assert shapes.padding_metrics(pooled["padding"]) == shapes.padding_metrics(direct["padding"])
    m = diagnostics.completion_metrics(direct["completion"])
    assert m["completion_truncated"] == 0.75 and m["completion_len/max"] == 9
    assert m["policy_entropy"] == pytest.approx((entropy * whole.completion_mask()).sum() / lengths.sum())

    criteria = load_rubric("creative_writing").criteria[:3]
    weights = np.asarray([0.25, 0.75, 0.0], np.float32)
    per_c = rng.rand(2, g, 3).astype(np.float32)
    health = [{"position_bias": 0.1, "invalid_fraction": 0.0}, {"position_bias": 0.3, "invalid_fraction": 0.5}]
    cfg = RewardConfig()
    pooled_j = merge_rows([{"per_c": per_c[i:i + 1], "health": health[i:i + 1]} for i in range(2)])
    assert judge_metrics(pooled_j, criteria, weights, cfg) == judge_metrics({"per_c": per_c, "health": health},
                                                                            criteria, weights, cfg)
    jm = judge_metrics(pooled_j, criteria, weights, cfg)
    assert jm["active_criteria"] == 2 and jm["judge/position_bias"] == pytest.approx(0.2)
    assert jm[f"win_rate_max/{criteria[1].id}"] == pytest.approx(per_c[:, :, 1].max(axis=1).mean())

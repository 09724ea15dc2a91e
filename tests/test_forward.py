"""The one forward: scanned vs unrolled layers, remat, attention kernels, shared prefixes, mesh context."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec

from conftest import torch_logits
from rubric_jax.models.transformer import KVCache, attention

VOCAB = 151936


def _batch(b=3, t=40, seed=0):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, VOCAB, (b, t))
    mask = np.ones((b, t), bool)
    mask[1, :t // 5] = False  # left padding
    if b > 2:
        mask[2, :t // 2 + 3] = False
    return jnp.asarray(tokens), jnp.asarray(mask)


def _variant(model, **runtime):
    """The same arrays under other runtime options (a new module; the fixture is left as it is)."""
    return nnx.merge(*nnx.split(model)).configure(**runtime)


@pytest.mark.slow
def test_scanned_equals_unrolled_and_transformers(tiny_qwen3, tiny_qwen3_model):
    tokens, mask = _batch()
    scanned, _ = tiny_qwen3_model(tokens, mask_bt=mask)
    unrolled, _ = _variant(tiny_qwen3_model, scan_layers=False)(tokens, mask_bt=mask)
    m = np.asarray(mask)
    assert np.abs(np.asarray(scanned) - np.asarray(unrolled))[m].max() <= 1e-5
    ref = torch_logits(tiny_qwen3[1], tokens, m.astype(int))
    assert np.abs(np.asarray(scanned) - ref)[m].max() <= 1e-4
    # the layers really are stacked: one kernel holds both layers
    assert tiny_qwen3_model.layers.self_attn.q_proj.kernel.get_value().shape[0] == tiny_qwen3_model.cfg.num_layers


def _loss_grads(model, tokens, mask):
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)

    def loss(p):
        logits, _ = nnx.merge(graphdef, p, rest)(tokens, mask_bt=mask)
        return jnp.sum(jnp.where(mask[..., None], jax.nn.log_softmax(logits), 0.0)[..., :64] ** 2) * 1e-3

    return jax.jit(jax.grad(loss))(params)


def _max_rel_diff(g0, g1):
    """Largest relative L2 error ||g1 - g0|| / ||g0|| over the parameter leaves. A rematerialised or
    re-fused program rounds differently at the level of a few f32 ulps (elementwise, the embedding's
    gradient of about 3 differs by ~2e-6 between two equivalent programs), so the bound is relative."""
    rel = jax.tree.map(lambda a, b: float(jnp.linalg.norm(a - b) / jnp.maximum(jnp.linalg.norm(a), 1e-30)), g0, g1)
    return max(jax.tree.leaves(rel))


@pytest.mark.parametrize("policy", ["full", "dots_saveable"])
@pytest.mark.slow
def test_remat_changes_no_gradient(tiny_qwen3_model, policy):
    tokens, mask = _batch(t=24)
    g0 = _loss_grads(tiny_qwen3_model, tokens, mask)
    g1 = _loss_grads(_variant(tiny_qwen3_model, remat=policy), tokens, mask)
    assert _max_rel_diff(g0, g1) <= 1e-6
    assert max(jax.tree.leaves(jax.tree.map(lambda a: float(jnp.abs(a).max()), g0))) > 1e-4  # non-trivial


@pytest.mark.parametrize("impl", ["xla", "chunked"])
@pytest.mark.slow
def test_attention_kernels_equal_plain(tiny_qwen3_model, impl):
    tokens, mask = _batch()
    plain, _ = tiny_qwen3_model(tokens, mask_bt=mask)
    other, _ = _variant(tiny_qwen3_model, attention=impl, attention_chunk=16)(tokens, mask_bt=mask)
    assert np.isfinite(np.asarray(other)).all()  # left-pad rows with no real key stay finite
    m = np.asarray(mask)
    assert np.abs(np.asarray(other) - np.asarray(plain))[m].max() <= 1e-5
    if impl == "chunked":  # the chunked path's gradient too (it rematerialises each query block)
        g0 = _loss_grads(tiny_qwen3_model, tokens, mask)
        g1 = _loss_grads(_variant(tiny_qwen3_model, attention=impl, attention_chunk=16), tokens, mask)
        assert _max_rel_diff(g0, g1) <= 1e-6


def test_chunked_attention_bounds_score_memory():
    """The chunked kernel never builds (B, N, T, S) scores: the largest intermediate of the compiled
    program shrinks with the chunk (checked on the optimised HLO's buffer sizes)."""
    b, t, n, k, h = 2, 512, 4, 2, 16
    q = jnp.zeros((b, t, n, h))
    kv = jnp.zeros((b, k, t, h))
    mask = jnp.tril(jnp.ones((t, t), bool))[None].repeat(b, 0)

    def temp_bytes(impl):
        f = jax.jit(lambda q, kk, vv, m: attention(q, kk, vv, m, impl=impl, chunk=64))
        return f.lower(q, kv, kv, mask).compile().memory_analysis().temp_size_in_bytes

    full_scores = b * n * t * t * 4
    assert temp_bytes("plain") >= full_scores
    assert temp_bytes("chunked") < full_scores / 2


@pytest.mark.slow
def test_shared_prefixes_equal_full_sequences(tiny_qwen3_model):
    """heads -> bodies (J per head) -> suffixes, each through the forward with the earlier parts as
    prefixes, equals each full sequence run alone; rotary positions continue after the prefixes."""
    model = tiny_qwen3_model
    rng = np.random.RandomState(3)
    heads = [rng.randint(0, VOCAB, n) for n in (9, 6)]
    bodies = [[rng.randint(0, VOCAB, n) for n in (5, 3)], [rng.randint(0, VOCAB, n) for n in (4, 2)]]
    suffix = rng.randint(0, VOCAB, 4)
    hp = np.zeros((2, 9), np.int32)
    hm = np.zeros((2, 9), bool)
    for i, h in enumerate(heads):
        hp[i, :len(h)], hm[i, :len(h)] = h, True  # right padded
    _, hc = model(jnp.asarray(hp), mask_bt=jnp.asarray(hm), return_kv=True)
    bp = np.zeros((4, 5), np.int32)
    bm = np.zeros((4, 5), bool)
    for i, bb in enumerate(bodies):
        for j, body in enumerate(bb):
            bp[2 * i + j, :len(body)], bm[2 * i + j, :len(body)] = body, True
    _, bc = model(jnp.asarray(bp), mask_bt=jnp.asarray(bm), prefixes=(hc.as_prefix(),), return_kv=True)
    assert bc.k.shape[1] == 4 and hc.k.shape[1] == 2  # one copy per head, none per body
    out, _ = model(jnp.asarray(np.tile(suffix, (4, 1))), prefixes=(hc.as_prefix(), bc.as_prefix()))
    for i in range(2):
        for j in range(2):
            seq = np.concatenate([heads[i], bodies[i][j], suffix])
            ref, _ = model(jnp.asarray(seq[None]))
            np.testing.assert_allclose(np.asarray(out[2 * i + j]), np.asarray(ref[0, -4:]), atol=1e-4)


@pytest.mark.slow
def test_decode_against_a_prefix_equals_a_plain_cache(tiny_qwen3_model):
    model = tiny_qwen3_model
    tokens, mask = _batch(b=2, t=12, seed=9)
    _, pre = model(tokens, mask_bt=mask, return_kv=True)
    own = KVCache.empty(model.cfg, 6, 4)  # 3 rows per prompt
    nxt = jnp.asarray(np.random.RandomState(1).randint(0, VOCAB, (6, 1)))
    a, own = model(nxt, cache=own, prefixes=(pre.as_prefix(),))
    plain = KVCache.empty(model.cfg, 6, 16)
    _, plain = model(jnp.repeat(tokens, 3, 0), mask_bt=jnp.repeat(mask, 3, 0), cache=plain)
    b, _ = model(nxt, cache=plain)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


@pytest.mark.slow
def test_prefix_rows_must_divide_the_batch(tiny_qwen3_model):
    tokens, mask = _batch(b=2, t=8)
    _, pre = tiny_qwen3_model(tokens, mask_bt=mask, return_kv=True)
    with pytest.raises(ValueError, match="prefix of 2 rows"):
        tiny_qwen3_model(jnp.zeros((3, 2), jnp.int32), prefixes=(pre.as_prefix(),))


def test_bad_runtime_options_fail_clearly(tiny_qwen3_model):
    with pytest.raises(ValueError, match="remat"):
        _variant(tiny_qwen3_model, remat="sometimes")
    with pytest.raises(ValueError, match="unknown runtime options"):
        _variant(tiny_qwen3_model, flash=True)


@pytest.mark.slow
def test_mesh_context_is_not_stale(tiny_qwen3, tmp_path_factory):
    """A function jitted outside a mesh and then called inside one (and back) gets the right shardings (the
    8-device subprocess is shared with the other mesh checks: test_sharding.mesh_check)."""
    from test_sharding import mesh_check

    res = mesh_check(tmp_path_factory, "mesh_context_check", tiny_qwen3[0])
    assert res["outside_before"] == "SingleDeviceSharding"
    assert res["inside"] == "NamedSharding" and res["inside_spec"] == str(PartitionSpec(("data", "fsdp"), None, "tensor"))
    assert res["outside_after"] == "SingleDeviceSharding"
    assert res["max_diff"] <= 1e-5

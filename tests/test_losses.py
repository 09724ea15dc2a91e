"""Tests for rubric_jax.rl.losses and rubric_jax.rl.logprobs against an independent loop-based numpy reference."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax.rl import logprobs as lp_mod
from rubric_jax.rl import losses as L

AGGS = ("token_mean", "seq_mean", "dr_grpo")
MAX_LEN = 16


# ----------------------------------------------------------------------------------------------------------
# Independent reference: scalar Python loops over sequences and tokens.
# ----------------------------------------------------------------------------------------------------------
def ref_token_pg(lp, old, a, eps_low, eps_high, dual):
    rho = math.exp(lp - old)
    rho_c = min(max(rho, 1.0 - eps_low), 1.0 + eps_high)
    loss = -min(rho * a, rho_c * a)
    if dual is not None and a < 0:
        loss = min(loss, -dual * a)
    return loss


def ref_token_kl(lp, ref, kind):
    if kind == "k1":
        return lp - ref
    r = math.exp(ref - lp)
    return r - math.log(r) - 1.0


def ref_loss(logp, old, ref, adv, mask, agg, eps_low=0.2, eps_high=0.2, dual=3.0, kl_coef=0.0,
             kl_kind="k3", max_len=MAX_LEN):
    logp, old, adv, mask = (np.asarray(x, np.float64) for x in (logp, old, adv, mask))
    total, n_tok, n_seq, seq_means = 0.0, 0, 0, []
    for b in range(logp.shape[0]):
        s, n = 0.0, 0
        for t in range(logp.shape[1]):
            if mask[b, t] == 0:
                continue
            x = ref_token_pg(logp[b, t], old[b, t], adv[b], eps_low, eps_high, dual)
            if kl_coef:
                x += kl_coef * ref_token_kl(logp[b, t], float(ref[b, t]), kl_kind)
            s += x
            n += 1
        if n:
            n_seq += 1
            seq_means.append(s / n)
        total += s
        n_tok += n
    if agg == "token_mean":
        return total / n_tok if n_tok else 0.0
    if agg == "seq_mean":
        return sum(seq_means) / n_seq if n_seq else 0.0
    return total / (n_seq * max_len) if n_seq else 0.0


def make_batch(seed, b=5, t=7, empty_row=True, spread=0.4):
    rng = np.random.default_rng(seed)
    logp = -rng.uniform(0.05, 3.0, (b, t))
    old = logp + rng.normal(0.0, spread, (b, t))
    ref = logp + rng.normal(0.0, 0.3, (b, t))
    adv = rng.normal(0.0, 1.0, (b,))
    adv[1] = 0.0
    lens = rng.integers(1, t + 1, (b,))
    if empty_row:
        lens[-1] = 0
    mask = (np.arange(t)[None, :] < lens[:, None]).astype(np.float32)
    return logp, old, ref, adv, mask


def cfg_for(agg, **kw):
    return L.LossConfig(aggregation=agg, max_completion_len=MAX_LEN, **kw)


def to32(*xs):
    return tuple(jnp.asarray(x, jnp.float32) for x in xs)


# ----------------------------------------------------------------------------------------------------------
# Values and gradients vs the reference.
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("kl", [(0.0, "k3"), (0.05, "k3"), (0.1, "k1")])
def test_matches_reference(agg, kl):
    coef, kind = kl
    for seed in range(3):
        logp, old, ref, adv, mask = make_batch(seed, spread=0.8)
        cfg = cfg_for(agg, eps_low=0.2, eps_high=0.28, dual_clip=3.0, kl_coef=coef, kl_kind=kind)
        loss, metrics = L.grpo_loss(*to32(logp, old), jnp.asarray(ref, jnp.float32) if coef else None,
                                    *to32(adv, mask), cfg)
        want = ref_loss(logp, old, ref, adv, mask, agg, 0.2, 0.28, 3.0, coef, kind)
        np.testing.assert_allclose(float(loss), want, rtol=1e-6, atol=1e-6)
        want_pg = ref_loss(logp, old, ref, adv, mask, agg, 0.2, 0.28, 3.0, 0.0)
        np.testing.assert_allclose(float(metrics["pg_loss"]), want_pg, rtol=1e-6, atol=1e-6)
        assert float(metrics["n_tokens"]) == mask.sum()
        assert float(metrics["n_seqs"]) == (mask.sum(1) > 0).sum()


@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("kl", [(0.0, "k3"), (0.1, "k3"), (0.1, "k1")])
def test_grad_vs_central_differences_x64(agg, kl):
    coef, kind = kl
    logp, old, ref, adv, mask = make_batch(7, b=4, t=5, spread=0.8)
    cfg = cfg_for(agg, eps_low=0.2, eps_high=0.28, kl_coef=coef, kl_kind=kind)
    with jax.enable_x64(True):
        f = lambda x: L.grpo_loss(x, jnp.asarray(old), jnp.asarray(ref), jnp.asarray(adv),
                                  jnp.asarray(mask, jnp.float64), cfg)[0]
        g = np.asarray(jax.grad(f)(jnp.asarray(logp, jnp.float64)))
        assert g.dtype == np.float64
    h = 1e-6
    fd = np.zeros_like(logp)
    for i in range(logp.shape[0]):
        for j in range(logp.shape[1]):
            up, dn = logp.copy(), logp.copy()
            up[i, j] += h
            dn[i, j] -= h
            fd[i, j] = (ref_loss(up, old, ref, adv, mask, agg, 0.2, 0.28, 3.0, coef, kind)
                        - ref_loss(dn, old, ref, adv, mask, agg, 0.2, 0.28, 3.0, coef, kind)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    assert np.all(g[mask == 0] == 0)


# ----------------------------------------------------------------------------------------------------------
# Clipping.
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_clip_and_dual_clip_fire():
    logp, old, ref, adv, mask = make_batch(3, b=6, t=8, empty_row=False)
    adv = np.array([1.0, -1.0, 0.5, -0.7, 1.3, -2.0])
    mask[:] = 1.0
    old = logp.copy()
    old[0, :3] = logp[0, :3] - 0.5          # rho = e^0.5 > 1.2, A > 0   -> high clip
    old[1, :3] = logp[1, :3] + 0.5          # rho = e^-0.5 < 0.8, A < 0  -> low clip
    old[3, :2] = logp[3, :2] - 1.5          # rho = e^1.5 > 3, A < 0     -> dual clip
    old[5, 4:] = logp[5, 4:] - 2.0          # rho = e^2 > 3, A < 0       -> dual clip
    args = to32(logp, old)
    cfg = cfg_for("token_mean", eps_low=0.2, eps_high=0.2, dual_clip=3.0)
    terms = L.policy_loss_terms(*args, jnp.asarray(adv, jnp.float32), 0.2, 0.2, 3.0)
    assert float(terms.clipped_high_bt.sum()) == 3
    assert float(terms.clipped_low_bt.sum()) == 3
    assert float(terms.dual_clipped_bt.sum()) == 2 + 4
    # dual-clipped tokens are capped at exactly -c * A (> 0)
    np.testing.assert_allclose(np.asarray(terms.loss_bt)[3, :2], 3.0 * 0.7, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(terms.loss_bt)[5, 4:], 3.0 * 2.0, rtol=1e-6)

    loss, m = L.grpo_loss(*args, None, jnp.asarray(adv, jnp.float32), jnp.asarray(mask), cfg)
    assert float(m["clip_high_frac"]) == pytest.approx(3 / 48)
    assert float(m["clip_low_frac"]) == pytest.approx(3 / 48)
    assert float(m["clip_frac"]) == pytest.approx(6 / 48)
    assert float(m["dual_clip_frac"]) == pytest.approx(6 / 48)
    unclipped = L.LossConfig(eps_low=1e9, eps_high=1e9, dual_clip=None)
    loss_u, m_u = L.grpo_loss(*args, None, jnp.asarray(adv, jnp.float32), jnp.asarray(mask), unclipped)
    assert abs(float(loss) - float(loss_u)) > 1e-3
    assert float(m_u["clip_frac"]) == 0 and float(m_u["dual_clip_frac"]) == 0
    np.testing.assert_allclose(float(loss_u), -np.mean(np.exp(logp - old) * adv[:, None]), rtol=1e-5)
    np.testing.assert_allclose(float(loss), ref_loss(logp, old, None, adv, mask, "token_mean"), rtol=1e-6)
    # clipped tokens carry no gradient; the others do
    g = np.asarray(jax.grad(lambda x: L.grpo_loss(x, args[1], None, jnp.asarray(adv, jnp.float32),
                                                  jnp.asarray(mask), cfg)[0])(args[0]))
    dead = np.asarray(terms.clipped_high_bt + terms.clipped_low_bt + terms.dual_clipped_bt) > 0
    assert np.all(g[dead] == 0)
    assert np.all(g[~dead & (adv[:, None] != 0)] != 0)
    # dual clip disabled: the exploded negative-advantage tokens are no longer capped
    t_nodual = L.policy_loss_terms(*args, jnp.asarray(adv, jnp.float32), 0.2, 0.2, None)
    assert float(t_nodual.dual_clipped_bt.sum()) == 0
    assert float(t_nodual.loss_bt[3, 0]) > 3.0 * 0.7


@pytest.mark.parametrize("agg", AGGS)
def test_on_policy_ratio_one(agg):
    logp, _, _, adv, mask = make_batch(11)
    cfg = cfg_for(agg)
    f = lambda x: L.grpo_loss(x, jax.lax.stop_gradient(x), None, jnp.asarray(adv, jnp.float32),
                              jnp.asarray(mask), cfg)
    (loss, m), g = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp, jnp.float32))
    n_b = mask.sum(1)
    valid = n_b > 0
    if agg == "token_mean":
        want, w_b = -(adv * n_b).sum() / n_b.sum(), 1.0 / n_b.sum() * np.ones_like(n_b)
    elif agg == "seq_mean":
        want = -adv[valid].mean()
        w_b = np.where(valid, 1.0 / np.maximum(n_b, 1) / valid.sum(), 0.0)
    else:
        want, w_b = -(adv * n_b).sum() / (valid.sum() * MAX_LEN), np.ones_like(n_b) / (valid.sum() * MAX_LEN)
    np.testing.assert_allclose(float(loss), want, rtol=1e-6, atol=1e-7)
    assert float(m["clip_frac"]) == 0 and float(m["dual_clip_frac"]) == 0
    assert float(m["ratio"]) == pytest.approx(1.0)
    # d/dlogp of -rho * A at rho = 1 is -A, weighted by the aggregation
    np.testing.assert_allclose(np.asarray(g), -(adv * w_b)[:, None] * mask, rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------------------------------------
# Micro-batch accumulation.
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("splits", [(3,), (1, 4)])
@pytest.mark.slow
def test_microbatch_accumulation(agg, splits):
    logp, old, ref, adv, mask = make_batch(5, b=7, t=6, spread=0.6)
    mask = (np.arange(6)[None, :] < np.array([6, 1, 3, 0, 5, 2, 4])[:, None]).astype(np.float32)
    cfg = cfg_for(agg, eps_high=0.28, kl_coef=0.05, kl_kind="k3")
    logp_j, old_j, ref_j, adv_j, mask_j = to32(logp, old, ref, adv, mask)
    bounds = (0,) + splits + (7,)
    parts = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    counts = [mask[p].sum() for p in parts]
    assert len(set(counts)) == len(counts)  # unequal valid-token counts

    def full(x):
        return L.grpo_loss(x, old_j, ref_j, adv_j, mask_j, cfg)[0]

    def split(x):
        sums = [L.loss_sums(x[p], old_j[p], ref_j[p], adv_j[p], mask_j[p], cfg) for p in parts]
        return L.finalize(L.add_sums(*sums))[0]

    lf, gf = jax.value_and_grad(full)(logp_j)
    ls, gs = jax.value_and_grad(split)(logp_j)
    np.testing.assert_allclose(float(ls), float(lf), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(gs), np.asarray(gf), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(float(lf), ref_loss(logp, old, ref, adv, mask, agg, 0.2, 0.28, 3.0, 0.05),
                               rtol=1e-6)

    # The training-loop form: accumulate grad(num) per micro-batch and the dens, divide once at the end.
    den = 0.0
    g_parts = []
    for p in parts:
        g_parts.append(jax.grad(lambda x: L.loss_sums(x, old_j[p], ref_j[p], adv_j[p], mask_j[p], cfg).num)(
            logp_j[p]))
        den += float(L.loss_denominator(mask_j[p], cfg))
    assert den == pytest.approx(float(L.loss_denominator(mask_j, cfg)))
    np.testing.assert_allclose(np.concatenate(g_parts) / den, np.asarray(gf), rtol=1e-5, atol=1e-8)


def test_dr_grpo_denominator_uses_config_len_not_batch_len():
    logp, old, _, adv, mask = make_batch(2, b=3, t=4, empty_row=False)
    cfg = cfg_for("dr_grpo")
    s = L.loss_sums(*to32(logp, old), None, *to32(adv, mask), cfg)
    assert float(s.den) == 3 * MAX_LEN
    with pytest.raises(ValueError):
        L.grpo_loss(*to32(logp, old), None, *to32(adv, mask), L.LossConfig(aggregation="dr_grpo"))
    with pytest.raises(ValueError):
        L.grpo_loss(*to32(logp, old), None, *to32(adv, mask), L.LossConfig(aggregation="mean"))


# ----------------------------------------------------------------------------------------------------------
# KL.
# ----------------------------------------------------------------------------------------------------------
def test_kl_estimators():
    lp = jnp.array([[-1.0, -2.0, -0.5]])
    rf = jnp.array([[-2.0, -1.0, -0.5]])
    np.testing.assert_allclose(np.asarray(L.kl_penalty(lp, rf, "k1")), [[1.0, -1.0, 0.0]], atol=1e-7)
    # k3 with d = ref - logp: e^d - d - 1;  d = -1 -> e^-1;  d = 1 -> e - 2;  d = 0 -> 0
    np.testing.assert_allclose(np.asarray(L.kl_penalty(lp, rf, "k3")), [[math.exp(-1), math.e - 2, 0.0]],
                               rtol=1e-6, atol=1e-7)
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 3, (2, 64, 32))
    k3 = np.asarray(L.kl_penalty(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), "k3"))
    assert np.all(k3 >= 0)
    with pytest.raises(ValueError):
        L.kl_penalty(lp, rf, "k2")


def test_kl_coef_zero_needs_no_reference():
    logp, old, ref, adv, mask = make_batch(4)
    args = to32(logp, old)
    loss0, m0 = L.grpo_loss(*args, None, *to32(adv, mask), cfg_for("token_mean", kl_coef=0.0))
    loss1, _ = L.grpo_loss(*args, jnp.asarray(ref, jnp.float32), *to32(adv, mask),
                           cfg_for("token_mean", kl_coef=0.0))
    assert float(loss0) == float(loss1) and float(m0["kl"]) == 0.0
    with pytest.raises(ValueError):
        L.grpo_loss(*args, None, *to32(adv, mask), cfg_for("token_mean", kl_coef=0.01))
    loss2, m2 = L.grpo_loss(*args, jnp.asarray(ref, jnp.float32), *to32(adv, mask),
                            cfg_for("token_mean", kl_coef=0.01))
    assert float(m2["kl"]) > 0
    np.testing.assert_allclose(float(loss2), float(m2["pg_loss"]) + 0.01 * float(m2["kl"]), rtol=1e-6)


# ----------------------------------------------------------------------------------------------------------
# Edge cases, jit, config objects.
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("agg", AGGS)
def test_empty_mask_is_zero_not_nan(agg):
    logp, old, _, adv, mask = make_batch(1)
    z = jnp.zeros_like(jnp.asarray(mask))
    f = lambda x: L.grpo_loss(x, jnp.asarray(old, jnp.float32), None, jnp.asarray(adv, jnp.float32), z,
                              cfg_for(agg))
    (loss, m), g = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp, jnp.float32))
    assert float(loss) == 0.0 and np.all(np.asarray(g) == 0)
    assert all(np.isfinite(float(v)) for v in m.values())


def test_jit_and_dict_config():
    logp, old, ref, adv, mask = make_batch(9)
    cfg = {"aggregation": "seq_mean", "kl_coef": 0.001, "eps_high": 0.28}
    f = jax.jit(functools.partial(L.grpo_loss, cfg=cfg))
    loss, m = f(*to32(logp, old, ref, adv, mask))
    np.testing.assert_allclose(float(loss), ref_loss(logp, old, ref, adv, mask, "seq_mean", 0.2, 0.28, 3.0,
                                                     0.001), rtol=1e-6)
    ent = jnp.ones_like(jnp.asarray(logp, jnp.float32)) * 2.5
    _, m = L.grpo_loss(*to32(logp, old, ref, adv, mask), cfg, entropy_bt=ent)
    assert float(m["entropy"]) == pytest.approx(2.5)


# ----------------------------------------------------------------------------------------------------------
# Log-probs.
# ----------------------------------------------------------------------------------------------------------
def _lp_inputs(b=2, t=13, d=8, v=50, seed=0):
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)
    hidden = jax.random.normal(k1, (b, t, d), jnp.float32)
    unembed = jax.random.normal(k2, (d, v), jnp.float32) * 0.5
    targets = jax.random.randint(k3, (b, t), 0, v)
    return hidden, unembed, targets


@pytest.mark.slow
def test_token_logprobs_vs_numpy():
    hidden, unembed, targets = _lp_inputs()
    logits = np.asarray(hidden, np.float64) @ np.asarray(unembed, np.float64)
    lp, ent = map(np.asarray, lp_mod.token_logprobs(jnp.asarray(logits, jnp.float32), targets))
    targets = np.asarray(targets)
    b, t, _ = logits.shape
    for i in range(b):
        for j in range(t):
            row = logits[i, j]
            lse = row.max() + math.log(np.exp(row - row.max()).sum())
            p = np.exp(row - lse)
            assert float(lp[i, j]) == pytest.approx(row[int(targets[i, j])] - lse, abs=1e-5)
            assert float(ent[i, j]) == pytest.approx(-(p * np.log(p)).sum(), abs=1e-5)


@pytest.mark.parametrize("chunk,temp", [(4, 1.0), (5, 0.7), (13, 1.0), (64, 1.0)])
@pytest.mark.slow
def test_chunked_matches_unchunked(chunk, temp):
    hidden, unembed, targets = _lp_inputs()
    w1, w2 = jax.random.normal(jax.random.PRNGKey(1), (2,) + targets.shape)

    def obj(fn, h, u):
        lp, ent = fn(h, u)
        return jnp.sum(w1 * lp) + jnp.sum(w2 * ent)

    plain = lambda h, u: lp_mod.token_logprobs(jnp.einsum("btd,dv->btv", h, u), targets, temp)
    chunked = lambda h, u: lp_mod.token_logprobs_chunked(h, u, targets, chunk=chunk, temperature=temp)
    (lp0, e0), (lp1, e1) = plain(hidden, unembed), chunked(hidden, unembed)
    assert lp1.shape == targets.shape and lp1.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(lp1), np.asarray(lp0), atol=1e-5)
    np.testing.assert_allclose(np.asarray(e1), np.asarray(e0), atol=1e-5)
    g0 = jax.grad(functools.partial(obj, plain), argnums=(0, 1))(hidden, unembed)
    g1 = jax.grad(functools.partial(obj, chunked), argnums=(0, 1))(hidden, unembed)
    for a, b in zip(g1, g0):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=1e-5)


def _all_avals(jaxpr):
    for eqn in jaxpr.eqns:
        for v in eqn.outvars:
            yield v.aval
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _all_avals(inner)


def test_chunked_never_builds_full_logits():
    b, t, d, v = 2, 13, 8, 50
    hidden, unembed, targets = _lp_inputs(b, t, d, v)
    f = lambda h, u: jnp.sum(lp_mod.token_logprobs_chunked(h, u, targets, chunk=4)[0])
    jaxpr = jax.make_jaxpr(jax.grad(f, argnums=(0, 1)))(hidden, unembed).jaxpr
    sizes = [int(np.prod(a.shape)) for a in _all_avals(jaxpr) if hasattr(a, "shape")]
    assert max(s for s in sizes) < b * t * v  # largest is one chunk's (B, chunk, V) block
    assert b * 4 * v in sizes


def test_chunked_bf16_inputs_give_f32():
    hidden, unembed, targets = _lp_inputs()
    lp, ent = lp_mod.token_logprobs_chunked(hidden.astype(jnp.bfloat16), unembed.astype(jnp.bfloat16),
                                            targets, chunk=4)
    assert lp.dtype == jnp.float32 and ent.dtype == jnp.float32
    lp0, _ = lp_mod.token_logprobs(hidden @ unembed, targets)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(lp0), atol=0.1)

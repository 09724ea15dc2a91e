"""GSPO's sequence ratio, CISPO's objective and DAPO's truncation mask (rubric_jax.rl.losses, rubric_jax.rl.policy)
against hand-computed batches, finite differences and the token-level loss they reduce to."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax.rl.losses import LossConfig, grpo_loss, policy_loss_terms, sequence_ratio
from rubric_jax.rl.policy import RolloutBatch, mask_truncated, truncated_rows

# two sequences of 3 and 2 valid tokens; old log-probs fixed, new ones moved by hand-picked amounts
OLD = np.log(np.array([[0.5, 0.4, 0.2], [0.3, 0.6, 0.9]], np.float64))
MOVE = np.array([[0.1, -0.3, 0.05], [0.02, 0.01, 0.7]], np.float64)
MASK = np.array([[1, 1, 1], [1, 1, 0]], bool)
ADV = np.array([1.5, -0.5], np.float64)


def _loss(cfg, logp, old=OLD, adv=ADV, mask=MASK):
    return grpo_loss(jnp.asarray(logp), jnp.asarray(old), None, jnp.asarray(adv), jnp.asarray(mask), cfg)[0]


def test_gspo_sequence_ratio_and_loss_match_a_hand_computation():
    logp = OLD + MOVE
    # s_i = exp(mean over the valid tokens of logp - old): hand-computed from MOVE
    s = np.exp(np.array([(0.1 - 0.3 + 0.05) / 3, (0.02 + 0.01) / 2]))
    got = np.asarray(sequence_ratio(jnp.asarray(logp), jnp.asarray(OLD), jnp.asarray(MASK)))
    np.testing.assert_allclose(got, np.repeat(s[:, None], 3, 1), rtol=1e-6)
    eps_lo, eps_hi = 0.03, 0.04
    cfg = LossConfig(aggregation="seq_mean", eps_low=eps_lo, eps_high=eps_hi, dual_clip=None, importance="sequence")
    per_seq = -np.minimum(s * ADV, np.clip(s, 1 - eps_lo, 1 + eps_hi) * ADV)
    # s_0 = exp(-0.0833) = 0.92 < 1 - 0.03 with A > 0: the unclipped branch is the minimum; s_1 inside the range
    np.testing.assert_allclose(float(_loss(cfg, logp)), per_seq.mean(), rtol=1e-6)
    # token_mean weights each sequence's term by its length
    cfg_tok = dataclasses.replace(cfg, aggregation="token_mean")
    np.testing.assert_allclose(float(_loss(cfg_tok, logp)), (3 * per_seq[0] + 2 * per_seq[1]) / 5, rtol=1e-6)


def test_gspo_gradient_matches_finite_differences():
    cfg = LossConfig(aggregation="token_mean", eps_low=0.2, eps_high=0.2, dual_clip=3.0, importance="sequence")
    with jax.enable_x64(True):
        logp = jnp.asarray(OLD + MOVE, jnp.float64)
        f = jax.jit(lambda x: _loss(cfg, x))
        g = np.asarray(jax.grad(f)(logp))
        h = 1e-6
        fd = np.zeros_like(g)
        for idx in np.ndindex(*logp.shape):
            e = np.zeros(logp.shape)
            e[idx] = h
            fd[idx] = (float(f(logp + e)) - float(f(logp - e))) / (2 * h)
    np.testing.assert_allclose(g, fd, atol=1e-8)
    assert g[1, 2] == 0.0  # the padded token gets no gradient
    assert np.all(g[0] != 0) and np.all(g[1, :2] != 0)  # every valid token shares its sequence's gradient


def test_gspo_on_one_token_completions_is_the_token_level_loss():
    old = OLD[:, :1]
    logp = old + np.array([[0.3], [-0.4]])
    mask = np.ones((2, 1), bool)
    for objective in ("clip", "cispo"):
        tok = LossConfig(aggregation="token_mean", objective=objective)
        seq = dataclasses.replace(tok, importance="sequence")
        f = lambda cfg: (lambda x: _loss(cfg, x, old=old, mask=mask))
        np.testing.assert_allclose(float(f(seq)(jnp.asarray(logp))), float(f(tok)(jnp.asarray(logp))), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(jax.grad(f(seq))(jnp.asarray(logp, jnp.float32))),
                                   np.asarray(jax.grad(f(tok))(jnp.asarray(logp, jnp.float32))), rtol=1e-6)


def test_gspo_clips_whole_sequences_not_tokens():
    # one token's ratio is far out of range (e^0.9), the sequence's geometric mean (e^0.1) is inside it
    old = np.log(np.full((1, 3), 0.3))
    logp = old + np.array([[0.9, -0.3, -0.3]])
    mask = np.ones((1, 3), bool)
    adv = np.array([1.0])
    grad = lambda cfg: np.asarray(jax.grad(lambda x: _loss(cfg, x, old=old, adv=adv, mask=mask))(
        jnp.asarray(logp, jnp.float32)))
    token = grad(LossConfig(aggregation="token_mean", eps_low=0.2, eps_high=0.2, dual_clip=None))
    seq = grad(LossConfig(aggregation="token_mean", eps_low=0.2, eps_high=0.2, dual_clip=None, importance="sequence"))
    assert token[0, 0] == 0.0 and token[0, 1] != 0.0  # token level: the outlier alone is clipped
    assert np.all(seq != 0.0)  # sequence level: the sequence is inside the range, every token learns
    # the whole sequence out of range (mean e^0.5 > 1.2) with A > 0: every token's gradient is clipped away
    logp_out = old + np.array([[0.9, 0.3, 0.3]])
    seq_out = np.asarray(jax.grad(lambda x: _loss(LossConfig(aggregation="token_mean", dual_clip=None,
                                                             importance="sequence"), x, old=old, adv=adv,
                                                  mask=mask))(jnp.asarray(logp_out, jnp.float32)))
    assert np.all(seq_out == 0.0)


def test_cispo_matches_a_hand_computed_batch_and_a_clipped_token_keeps_its_gradient():
    eps_lo, eps_hi = 0.2, 0.28
    logp = OLD + MOVE  # token (1, 2) is padding; token (0, 1) has ratio e^-0.3 = 0.74 < 0.8: clipped from below
    rho = np.exp(MOVE)
    w = np.clip(rho, 1 - eps_lo, 1 + eps_hi)
    adv_bt = np.broadcast_to(ADV[:, None], rho.shape)
    n = MASK.sum()
    cfg = LossConfig(aggregation="token_mean", eps_low=eps_lo, eps_high=eps_hi, objective="cispo")
    np.testing.assert_allclose(float(_loss(cfg, logp)), float((-w * adv_bt)[MASK].sum() / n), rtol=1e-6)
    g = np.asarray(jax.grad(lambda x: _loss(cfg, x))(jnp.asarray(logp, jnp.float32)))
    want = np.where(MASK, -w * adv_bt / n, 0.0)  # d/dlogp of -sg(w) A exp(logp - sg(logp)) = -w A
    np.testing.assert_allclose(g, want, rtol=1e-5)
    assert g[0, 1] != 0.0 and np.isclose(g[0, 1], -(1 - eps_lo) * ADV[0] / n)
    # the clip objective drops that token's gradient (A > 0, ratio below the range: the unclipped branch is the
    # minimum there, so PPO keeps it); a token above the range with A > 0 is where PPO drops it and CISPO keeps it
    up = OLD + np.array([[0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    ppo = np.asarray(jax.grad(lambda x: _loss(LossConfig(aggregation="token_mean", dual_clip=None), x))(
        jnp.asarray(up, jnp.float32)))
    cis = np.asarray(jax.grad(lambda x: _loss(cfg, x))(jnp.asarray(up, jnp.float32)))
    assert ppo[0, 0] == 0.0
    np.testing.assert_allclose(cis[0, 0], -(1 + eps_hi) * ADV[0] / n, rtol=1e-6)
    terms = policy_loss_terms(jnp.asarray(up), jnp.asarray(OLD), jnp.asarray(ADV), eps_lo, eps_hi, None,
                              objective="cispo")
    assert float(terms.clipped_high_bt[0, 0]) == 1.0 and float(terms.clipped_high_bt[0, 1]) == 0.0


def test_the_defaults_are_the_ppo_clip_formula():
    """With importance="token" and objective="clip" the loss is PPO's dual-clipped surrogate, computed here
    independently in numpy (float64)."""
    logp = OLD + MOVE * 3  # ratios far enough out to hit both clips and the dual clip
    adv = np.array([1.5, -2.0])
    cfg = LossConfig(aggregation="token_mean", eps_low=0.2, eps_high=0.2, dual_clip=1.5)
    rho = np.exp(logp - OLD)
    a = np.broadcast_to(adv[:, None], rho.shape)
    l = -np.minimum(rho * a, np.clip(rho, 0.8, 1.2) * a)
    l = np.where(a < 0, np.minimum(l, -1.5 * a), l)
    with jax.enable_x64(True):  # the loss is a small difference of O(1) terms: compare in float64
        np.testing.assert_allclose(float(_loss(cfg, logp, adv=adv)), l[MASK].mean(), rtol=1e-12)
    assert (a < 0)[l == -1.5 * a].any()  # the dual clip did bind somewhere


def test_bad_switches_are_refused():
    with pytest.raises(ValueError, match="importance"):
        LossConfig(importance="seq")
    with pytest.raises(ValueError, match="objective"):
        LossConfig(objective="gspo")
    with pytest.raises(ValueError, match="mask_bt"):
        policy_loss_terms(jnp.zeros((1, 2)), jnp.zeros((1, 2)), jnp.ones(1), importance="sequence")


def _batch():
    # prompt width 2; eos id 9. Row 0 ended (eos at column 1), row 1 ran to the cap, row 2 is an empty padding row,
    # row 3 ended exactly at the cap (eos in the last column): not truncated
    tokens = np.array([[1, 1, 5, 9, 0], [1, 1, 5, 6, 7], [0, 0, 0, 0, 0], [1, 1, 4, 4, 9]], np.int32)
    cmask = np.array([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1]], bool)
    return RolloutBatch(tokens_bt=tokens, mask_bt=np.concatenate([tokens[:, :2] > 0, cmask], 1), prompt_len=2,
                        completion_mask_bt=cmask, adv_b=np.array([1.0, -1.0, 0.0, 0.5], np.float32))


def test_truncated_rows_are_the_rows_with_no_end_token():
    np.testing.assert_array_equal(truncated_rows(_batch(), (9,)), [False, True, False, False])
    with pytest.raises(ValueError, match="end-of-sequence"):
        truncated_rows(_batch(), ())


def test_masking_truncated_rows_equals_dropping_them_from_the_loss():
    b = _batch()
    masked, share = mask_truncated(b, (9,))
    assert share == pytest.approx(1 / 3)  # one of the three non-empty rows
    np.testing.assert_array_equal(masked.completion_mask_bt[1], [False] * 3)
    np.testing.assert_array_equal(masked.completion_mask_bt[[0, 3]], b.completion_mask_bt[[0, 3]])
    rng = np.random.default_rng(0)
    old = np.log(rng.uniform(0.1, 0.9, (4, 3)))
    logp = old + rng.normal(0, 0.1, (4, 3))
    for agg in ("token_mean", "seq_mean", "dr_grpo"):
        cfg = LossConfig(aggregation=agg, max_completion_len=3)
        keep = [0, 3]
        got = grpo_loss(jnp.asarray(logp), jnp.asarray(old), None, jnp.asarray(b.adv_b),
                        jnp.asarray(masked.completion_mask_bt), cfg)[0]
        want = grpo_loss(jnp.asarray(logp[keep]), jnp.asarray(old[keep]), None, jnp.asarray(b.adv_b[keep]),
                         jnp.asarray(b.completion_mask_bt[keep]), cfg)[0]
        np.testing.assert_allclose(float(got), float(want), rtol=1e-6)

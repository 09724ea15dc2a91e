"""DAPO dynamic sampling: which groups are kept, how a short batch is padded, and that padding adds nothing to
any loss (the denominators count only kept groups)."""

import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax.rl.dynamic import DynamicConfig, dynamic_metrics, keep_groups, select_groups
from rubric_jax.rl.losses import LossConfig, finalize, loss_sums


def test_keep_groups_by_spread_and_drop():
    r = np.array([[0.5, 0.5, 0.5], [0.1, 0.9, 0.5], [0.3, 0.3 + 1e-9, 0.3], [0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(keep_groups(r, 1e-6), [False, True, False, True])
    np.testing.assert_array_equal(keep_groups(r, 0.0), [False, True, True, True])
    np.testing.assert_array_equal(keep_groups(r, 1e-6, drop_b=np.array([0, 0, 0, 1], bool)),
                                  [False, True, False, False])


def test_select_groups_fills_in_sampling_order_then_pads():
    sel = select_groups([np.array([False, True, False]), np.array([True, True, True])], 3)
    assert sel.picks == ((0, 1), (1, 0), (1, 1)) and sel.padded == 0
    np.testing.assert_array_equal(sel.weight, [1, 1, 1])
    # short: the kept ones first, then the earliest unkept at zero weight
    sel = select_groups([np.array([False, True, False]), np.array([False, False, False])], 3)
    assert sel.picks == ((0, 1), (0, 0), (0, 2)) and sel.padded == 2
    np.testing.assert_array_equal(sel.weight, [1, 0, 0])
    with pytest.raises(ValueError, match="2 groups sampled, 3 needed"):
        select_groups([np.array([True, True])], 3)


def test_config_and_metrics():
    with pytest.raises(ValueError, match="oversample"):
        DynamicConfig(enabled=True, oversample=1.5)
    with pytest.raises(ValueError, match="max_rounds"):
        DynamicConfig(max_rounds=-1)
    m = dynamic_metrics(sampled=12, kept=5, extra_rounds=2, padded=3, need=8)
    assert m["dynamic/kept_frac"] == 5 / 12 and m["dynamic/batch_fill"] == 5 / 8
    assert m["dynamic/padded_groups"] == 3.0 and m["dynamic/extra_rounds"] == 2.0


@pytest.mark.slow
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean", "dr_grpo"])
def test_padded_groups_change_no_loss(aggregation):
    """Zero-weight groups (advantage 0, empty completion mask) leave the loss, its gradient's denominator and
    every metric equal to the kept groups' alone; with ratio 1 the loss is the hand value -sum(A * n) / den."""
    rng = np.random.default_rng(0)
    g, t = 4, 6
    kept_mask = rng.random((2 * g, t)) < 0.7
    kept_mask[:, 0] = True
    kept_adv = rng.normal(size=2 * g).astype(np.float32)
    pad_mask = np.zeros((g, t), bool)
    logp = rng.normal(size=(3 * g, t)).astype(np.float32)
    cfg = LossConfig(aggregation=aggregation, max_completion_len=t, dual_clip=None)
    full = loss_sums(jnp.asarray(logp), jnp.asarray(logp), None, jnp.concatenate([kept_adv, np.zeros(g, np.float32)]),
                     jnp.asarray(np.concatenate([kept_mask, pad_mask])), cfg)
    kept = loss_sums(jnp.asarray(logp[:2 * g]), jnp.asarray(logp[:2 * g]), None, jnp.asarray(kept_adv),
                     jnp.asarray(kept_mask), cfg)
    loss_full, m_full = finalize(full)
    loss_kept, m_kept = finalize(kept)
    np.testing.assert_allclose(float(loss_full), float(loss_kept), rtol=1e-6)
    assert float(m_full["n_seqs"]) == 2 * g and float(m_full["n_tokens"]) == kept_mask.sum()
    n = kept_mask.sum(axis=1)
    hand = {"token_mean": -(kept_adv * n).sum() / n.sum(),
            "seq_mean": -(kept_adv * n / n).sum() / (2 * g),
            "dr_grpo": -(kept_adv * n).sum() / (2 * g * t)}[aggregation]
    np.testing.assert_allclose(float(loss_full), hand, rtol=1e-5)

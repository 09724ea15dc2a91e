"""Group advantages, zero-spread filtering and the RLMR guarantee on advantages."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rubric_jax.rewards import advantages, rlmr_penalty, standardise_in_group, zero_spread_mask

advantages = jax.jit(advantages, static_argnames=("kind", "ddof"))
standardise_in_group = jax.jit(standardise_in_group, static_argnames=("ddof",))
zero_spread_mask = jax.jit(zero_spread_mask)

R = np.array([[1.0, 2.0, 3.0, 6.0]], dtype=np.float32)  # mean 3, population var 3.5


def test_grpo_hand():
    std = np.sqrt(3.5)
    want = np.array([[-2.0, -1.0, 0.0, 3.0]]) / (std + 1e-6)
    np.testing.assert_allclose(advantages(R, "grpo"), want, rtol=1e-6)
    # sample std (ddof = 1): var = 14 / 3
    want1 = np.array([[-2.0, -1.0, 0.0, 3.0]]) / (np.sqrt(14.0 / 3.0) + 1e-6)
    np.testing.assert_allclose(advantages(R, "grpo", ddof=1), want1, rtol=1e-6)
    np.testing.assert_allclose(advantages(R, "grpo", eps=1.0), [[-2 / (std + 1), -1 / (std + 1), 0, 3 / (std + 1)]], rtol=1e-6)


def test_dr_grpo_hand():
    np.testing.assert_allclose(advantages(R, "dr_grpo"), [[-2.0, -1.0, 0.0, 3.0]], atol=1e-6)


def test_rloo_hand():
    # r_i - mean of the other three: 1 - 11/3, 2 - 10/3, 3 - 9/3, 6 - 6/3
    np.testing.assert_allclose(advantages(R, "rloo"), [[-8 / 3, -4 / 3, 0.0, 4.0]], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "rloo"])
def test_zero_spread_group_is_exactly_zero(kind):
    r = np.array([[0.1, 0.1, 0.1], [0.3, 0.3, 0.3], [0.0, 0.5, 1.0]], dtype=np.float32)
    a = np.asarray(advantages(r, kind))
    assert np.all(a[:2] == 0.0)
    assert np.all(np.isfinite(a)) and np.any(a[2] != 0)
    # G = 1
    a1 = np.asarray(advantages(np.array([[0.7], [0.2]], np.float32), kind))
    assert np.all(a1 == 0.0)
    a1 = np.asarray(advantages(np.array([[0.7]], np.float32), kind, ddof=1))
    assert np.all(a1 == 0.0)


def test_unknown_kind():
    with pytest.raises(ValueError, match="kind"):
        advantages(R, "ppo")


def test_zero_spread_mask_hand():
    r = np.array([[1.0, 1.0], [1.0, 2.0], [0.3, 0.3], [0.5, 0.50001]], np.float32)
    np.testing.assert_array_equal(zero_spread_mask(r), [True, False, True, False])
    np.testing.assert_array_equal(zero_spread_mask(r, atol=1e-3), [True, False, True, True])
    np.testing.assert_array_equal(zero_spread_mask(np.ones((2, 1))), [True, True])


def test_standardise_in_group_hand():
    z = standardise_in_group(np.array([[1.0, 2.0, 3.0], [4.0, 4.0, 4.0]], np.float32))
    s = np.sqrt(2.0 / 3.0)
    np.testing.assert_allclose(z, [[-1 / (s + 1e-6), 0.0, 1 / (s + 1e-6)], [0.0, 0.0, 0.0]], rtol=1e-6)


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "rloo"])
def test_jit_and_vmap(kind):
    rng = np.random.default_rng(0)
    r = rng.normal(size=(3, 5)).astype(np.float32)
    r[1] = 0.25
    f = jax.jit(lambda x: advantages(x, kind))
    batched = np.asarray(f(r))
    per_prompt = np.stack([np.asarray(advantages(r[b], kind)) for b in range(3)])
    np.testing.assert_allclose(batched, per_prompt, rtol=1e-6, atol=1e-7)
    v = np.asarray(jax.jit(jax.vmap(lambda x: advantages(x, kind)))(r))
    np.testing.assert_allclose(v, per_prompt, rtol=1e-6, atol=1e-7)
    assert np.all(v[1] == 0.0)
    np.testing.assert_array_equal(jax.jit(zero_spread_mask)(r), [False, True, False])


@jax.jit
def _penalty_then_advantages(r, violate, gamma):
    r_new, all_violate = rlmr_penalty(r, violate, gamma)
    adv = jnp.stack([advantages(r_new, kind) for kind in ("grpo", "dr_grpo", "rloo")])
    return r_new, all_violate, adv


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(2, 10),
    seed=st.integers(0, 2**31 - 1),
    gamma=st.floats(0.01, 1.0),
    scale=st.floats(0.01, 10.0),
)
@pytest.mark.slow
def test_rlmr_violators_get_negative_advantage(n, seed, gamma, scale):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, n))  # 0 < k < n
    r = (rng.uniform(-1.0, 1.0, size=n) * scale).astype(np.float32)
    violate = np.zeros(n, dtype=bool)
    if rng.uniform() < 0.5:
        violate[rng.permutation(n)[:k]] = True  # random violators
    else:
        violate[np.argsort(-r)[:k]] = True  # the violators wrote the best texts (hardest case)
    r_new, all_violate, adv = _penalty_then_advantages(jnp.asarray(r), jnp.asarray(violate), gamma)
    assert not bool(all_violate)
    r_new = np.asarray(r_new)
    for kind, a in zip(("grpo", "dr_grpo", "rloo"), np.asarray(adv)):
        assert np.all(a[violate] < 0), (kind, r, violate, r_new, a)
    # the guarantee itself: every violator at least gamma below the new mean (float slack)
    assert np.all(r_new[violate] <= r_new.mean() - gamma + 1e-5 * max(1.0, scale))
    # non-violators untouched
    np.testing.assert_array_equal(r_new[~violate], r[~violate])

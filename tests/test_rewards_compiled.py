"""rubric_jax.rewards.compiled: the jitted wrappers the training loop calls give the pure functions' values
(tests/test_rewards.py works those out by hand), with one compiled program per padded shape."""

import jax
import numpy as np
import pytest


@pytest.mark.slow
def test_the_trainers_compiled_reward_math_equals_the_pure_functions():
    """rubric_jax.rewards.compiled is what the training loop calls: the same values, one program per shape."""
    from rubric_jax import rewards as R
    from rubric_jax.rewards import compiled as RC

    rng = np.random.default_rng(0)
    r = rng.normal(size=(3, 4)).astype(np.float32)
    r[1] = 0.25  # a zero-spread group
    viol = rng.random((3, 4)) < 0.5
    # (one fused program may round a mean differently from op-by-op dispatch: equal to float32 precision)
    for kind in R.ADVANTAGE_KINDS:
        np.testing.assert_allclose(RC.advantages(r, kind=kind), R.advantages(r, kind=kind), rtol=2e-6, atol=1e-7)
        assert (np.asarray(RC.advantages(r, kind=kind))[1] == 0).all()  # exact zeros for the flat group
    np.testing.assert_array_equal(RC.zero_spread_mask(r), [False, True, False])
    np.testing.assert_allclose(RC.standardise_in_group(r), R.standardise_in_group(r), rtol=2e-6, atol=1e-7)
    RC.curriculum_weights._clear_cache()
    for step in range(6):
        for mode in ("emphasis", "equal"):
            np.testing.assert_array_equal(RC.curriculum_weights(step, 5, 2, alpha=0.5, mode=mode),
                                          R.curriculum_weights(step, 5, 2, alpha=0.5, mode=mode))
    assert RC.curriculum_weights._cache_size() == 2  # the step is an input, not a new program
    key = jax.random.key(3)
    np.testing.assert_array_equal(RC.dropout_weights(key, 6, 0.5), R.dropout_weights(key, 6, 0.5))
    np.testing.assert_array_equal(RC.all_active_weights(4), R.all_active_weights(4))
    w, lam = rng.random((4, 3)).astype(np.float32), np.array([0.5, 0.25, 0.25], np.float32)
    np.testing.assert_allclose(RC.pairwise_reward(w, lam), R.pairwise_reward(w, lam), rtol=1e-6)
    s, m, v = rng.integers(0, 5, (4, 3)).astype(np.float32), np.full(3, 4.0, np.float32), rng.random((4, 3)) < 0.8
    np.testing.assert_allclose(RC.absolute_reward(s, m, lam, v), R.absolute_reward(s, m, lam, v), rtol=1e-6)
    np.testing.assert_allclose(RC.normalised_scores(s, m), R.normalised_scores(s, m), rtol=1e-6)
    np.testing.assert_allclose(RC.absolute_reward(s, m, lam), R.absolute_reward(s, m, lam), rtol=1e-6)
    s[:, 1], v[:, 1] = 4.0, True  # criterion 1 saturated in the whole group
    for got, want in zip(RC.rare_reward(s, m, v), R.rare_reward(s, m, v)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(RC.saturated_criteria(s, v, m), R.saturated_criteria(s, v, m))
    assert np.asarray(RC.saturated_criteria(s, v, m)).tolist()[1] is True
    # the criterion axis is padded to a multiple of 8: 1 to 8 criteria are one program, 9 to 16 a second
    assert [RC.criteria_width(c) for c in (1, 7, 8, 9, 13, 16, 17)] == [8, 8, 8, 16, 16, 16, 24]
    RC._pairwise_reward._clear_cache()
    for c in range(1, 14):
        wc, lc = rng.random((4, c)).astype(np.float32), np.full(c, 1 / c, np.float32)
        np.testing.assert_allclose(RC.pairwise_reward(wc, lc), R.pairwise_reward(wc, lc), rtol=1e-6)
    assert RC._pairwise_reward._cache_size() == 2
    for got, want in zip(RC.rlmr_penalty(r, viol, 0.1), R.rlmr_penalty(r, viol, 0.1)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(RC.rlmr_delta(r, viol, 0.1), R.rlmr_delta(r, viol, 0.1), rtol=1e-6)
    np.testing.assert_allclose(RC.linear_mix(r, viol, 0.6, 0.4), R.linear_mix(r, viol, 0.6, 0.4), rtol=1e-6)
    np.testing.assert_array_equal(RC.flip_labels(key, viol, 0.3), R.flip_labels(key, viol, 0.3))

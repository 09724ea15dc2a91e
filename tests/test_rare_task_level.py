"""RARE task-level revision rules at each boundary (paper: >= 12 queries, >= 4 valid rollouts, two distinct
rewards, mean shift <= 0.35, median representative, five evenly spaced revisions)."""

import numpy as np
import pytest

from rubric_jax.rare import task_level as T


def group(key, step, rewards, valid=None):
    rewards = np.asarray(rewards, float)
    valid = np.ones(len(rewards), bool) if valid is None else np.asarray(valid, bool)
    return T.EvidenceGroup(key, step, f"query {key}", tuple(f"r{i}" for i in range(len(rewards))), rewards, valid,
                           np.zeros((len(rewards), 6), int))


def test_revision_steps_are_five_evenly_spaced_points_inside_the_run():
    assert T.revision_steps(60) == [10, 20, 30, 40, 50]
    assert T.revision_steps(340) == [57, 113, 170, 227, 283]
    assert T.revision_steps(6) == [2, 3, 4]  # a tiny run: duplicates merged, none before t = 2 or at the end
    assert T.revision_steps(3) == []


def test_eligible_groups_window_valid_rollouts_and_one_per_query():
    ev = [group("a", 7, [1, 1, 1, 1]), group("a", 9, [0, 1, 1, 1]), group("b", 8, [1, 1, 1, 0], [1, 1, 1, 0]),
          group("c", 9, [1, 0, 1, 0], [1, 1, 1, 1]), group("d", 6, [1, 1, 1, 1])]
    got = {g.key: g.step for g in T.eligible_groups(ev, 9)}
    # a: its latest group; b: 3 valid rollouts is too few; c: 4 is enough; d: step 6 is outside 7..9
    assert got == {"a": 9, "c": 9}


def test_revision_needs_twelve_distinct_queries():
    groups = [group(f"q{i}", 5, [i / 20, 0.5, 0.5, 0.5]) for i in range(11)]
    assert T.select_groups(groups) is None
    got = T.select_groups(groups + [group("q11", 5, [0.1] * 4)])
    assert got is not None and len(got) == 12


def test_more_than_sixteen_groups_are_spread_over_the_reward_ranking():
    groups = [group(f"q{i:02d}", 5, [i / 40] * 4) for i in range(40)]
    got = T.select_groups(groups)
    assert len(got) == 16
    means = [g.rewards.mean() for g in got]
    assert means == sorted(means) and means[0] == 0.0 and means[-1] == pytest.approx(39 / 40)
    ranks = [int(g.key[1:]) for g in got]
    assert max(np.diff(ranks)) - min(np.diff(ranks)) <= 1  # evenly spaced ranks


def test_representative_is_the_valid_rollout_nearest_the_median():
    assert T.representative(group("a", 0, [0.1, 0.4, 0.9, 0.5, 0.45])) == 4  # median 0.45
    # even count: median 0.5 of (0.2, 0.4, 0.6, 0.8); 0.4 and 0.6 tie, the first wins
    assert T.representative(group("a", 0, [0.2, 0.4, 0.6, 0.8])) == 1
    # the invalid rollout neither counts toward the median nor can be chosen
    assert T.representative(group("a", 0, [0.5, 0.0, 0.1, 0.9, 1.0], [0, 1, 1, 1, 1])) == 2
    with pytest.raises(ValueError):
        T.representative(group("a", 0, [0.5, 0.5], [0, 0]))


def test_acceptance_boundaries():
    old = np.full(12, 0.5)
    new = np.r_[np.full(6, 0.8), np.full(6, 0.9)]  # mean 0.85: shift exactly 0.35
    assert T.accept_revision(old, new, np.ones(12, bool))[0]
    new36 = np.r_[np.full(6, 0.81), np.full(6, 0.91)]  # shift 0.36
    ok, why = T.accept_revision(old, new36, np.ones(12, bool))
    assert not ok and "+0.360" in why
    ok, why = T.accept_revision(old, np.full(12, 0.6), np.ones(12, bool))
    assert not ok and "same reward" in why
    valid = np.ones(12, bool)
    valid[3] = False  # 11 valid pairs
    ok, why = T.accept_revision(old, new, valid)
    assert not ok and "only 11" in why
    assert T.accept_revision(np.full(13, 0.5), np.r_[new, 0.8], np.r_[valid, True])[0]  # 12 of 13 valid
    # the shift is over the valid pairs only
    assert T.accept_revision(np.r_[old, 0.0], np.r_[new, 1.0], np.r_[np.ones(12, bool), False])[0]

"""The peers' switches in training: each new config's :tiny variant (GSPO, CISPO, per-criterion normalisation,
overlong handling, length control) trains on the tiny random Qwen3 and logs what its docstring promises, and
every run logs the judge-bias audit. What is checked is the wiring into the step, not what a random model
learns: the math is tested on hand-computed arrays in test_loss_variants.py and test_shaping.py."""

import numpy as np
import pytest

from rubric_jax.rl import trainer

from conftest import load_config  # noqa: E402

pytestmark = pytest.mark.slow  # training runs: the full suite only

NEW = ("rcrl_gspo", "rcrl_per_criterion", "rcrl_overlong", "rcrl_length_control", "rlmr_cispo")


def _run(name, ckpt, tmp_path, steps):
    c = load_config(name, "tiny")
    c.unlock()
    c.model, c.steps, c.tensorboard = ckpt, steps, False
    c.max_completion_len = 8
    c.prompt_width = "max"  # the suite's tiny runs share sampler and update programs (tests/conftest.py)
    return c, trainer.train(c, str(tmp_path))


@pytest.mark.parametrize("name", NEW)
def test_each_new_switch_trains_in_its_tiny_config(name, tiny_qwen3, tmp_path):
    """One or two steps of the config's :tiny variant (two where the switch needs two criteria active: the
    curriculum adds one per step at interval 1)."""
    steps = 2 if name == "rcrl_per_criterion" else 1
    c, hist = _run(name, tiny_qwen3[0], tmp_path, steps)
    assert [m["step"] for m in hist] == list(range(steps))
    m = hist[-1]
    assert np.isfinite(m["loss"])
    if name != "rlmr_cispo":  # pairwise win rates: the audit's position figure and per-criterion shares
        assert 0.0 <= m["judge/first_position_rate"] <= 1.0
        shares = {k: v for k, v in m.items() if k.startswith("adv/criterion_share/")}
        assert len(shares) == m["active_criteria"]
        assert sum(shares.values()) == pytest.approx(1.0, abs=1e-5) or sum(shares.values()) == 0.0
        assert {k.replace("adv/criterion_share/", "reward/criterion/") for k in shares} <= set(m)
    if name == "rcrl_gspo":
        assert (c.loss.importance, c.loss.eps_low, c.loss.eps_high) == ("sequence", 3e-4, 4e-4)
        assert m["ratio"] == pytest.approx(1.0, abs=1e-5) and m["clip_frac"] == 0.0  # one update per batch
    if name == "rcrl_per_criterion":
        assert c.reward.normalise == "per_criterion" and m["active_criteria"] == 2
    if name == "rcrl_overlong":
        assert c.loss.mask_truncated and c.reward.overlong_penalty == 1.0
        assert -1.0 <= m["bonus/overlong"] <= 0.0
        # every group is used (no dynamic sampling), so the update masks exactly the truncated completions
        assert m["truncated_masked"] == pytest.approx(m["completion_truncated"])
    if name == "rcrl_length_control":
        assert m["bonus/length_control"] == pytest.approx(-np.log(m["completion_len/mean"]), abs=0.5)
    if name == "rlmr_cispo":
        assert c.loss.objective == "cispo" and m["dual_clip_frac"] == 0.0
        assert 0.0 <= m["rlmr/violate_frac"] <= 1.0

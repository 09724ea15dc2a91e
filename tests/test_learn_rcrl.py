"""configs/rcrl_judge15b.py, the rubric half of the first learning result: the policy judged by a model apart
from it (the embedded 1.5B), both pairwise questions pooled, a KL term that puts the KL curve in the log."""

import numpy as np
import pytest

from rubric_jax.rl import trainer, preflight
from rubric_jax.rl.metrics import read_metrics

from conftest import load_config  # noqa: E402
from test_trainer import _tiny_run_config  # noqa: E402


def test_the_config_judges_with_the_15b_apart_from_the_policy_and_fits_a_cpu_budget():
    full, tiny = load_config("rcrl_judge15b"), load_config("rcrl_judge15b", "tiny")
    for c in (full, tiny):
        preflight.check(c)
        assert c.reward.method == "pairwise" and c.reward.curriculum and c.judge.questions == "both"
        assert c.model == "smollm2-135m-instruct" and c.loss.kl_coef > 0
    assert full.judge.model == "qwen2.5-coder-1.5b-instruct" != full.model
    assert tiny.judge.model == "" and tiny.steps == 2 < full.steps
    # the judge sees every rollout whole: a cut response would be judged on text the policy did not end
    assert full.judge.max_response_tokens >= full.max_completion_len
    # the curriculum reaches a second criterion within the run, but not all 13 (few steps per criterion)
    assert full.reward.interval < full.steps <= 4 * full.reward.interval
    # ordered judgments per step: pairs x 2 orders x 2 questions x criteria, at most 3 criteria active
    g = full.group_size
    assert full.prompts_per_step * g * (g - 1) * 2 * 3 <= 150


@pytest.mark.slow
def test_tiny_variant_trains_two_steps_with_the_pooled_judge_and_logs_the_kl(tiny_qwen3, tmp_path):
    """rcrl_judge15b:tiny on the tiny random Qwen3 judging itself, as the other configs' step tests run (about
    15 s on 2 shared cores, most of it compiling the judge's scoring shapes): two steps, each judged with both
    questions, a finite loss and a KL to the base that is logged (0 at the first step, the adapters start at 0)."""
    cfg = _tiny_run_config("rcrl_judge15b", tiny_qwen3[0], steps=2)
    hist = trainer.train(cfg, str(tmp_path))
    assert [m["step"] for m in hist] == [0, 1]
    for m in hist:
        assert np.isfinite(m["loss"]) and np.isfinite(m["kl"]) and m["kl"] >= 0
        assert m["active_criteria"] >= 1
    assert hist[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert read_metrics(str(tmp_path))[-1]["step"] == 1

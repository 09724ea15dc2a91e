"""The judge's pairwise questions (JudgeConfig.questions): the worse reading and the pooled "both" reading.

The pooled figure is checked against a second formulation: two plain judges (the default prompt and one built
from prompts.WORSE_PROMPT by hand), their both-orders probabilities combined by the formula in numpy.
"""

import math

import numpy as np
import pytest

from rubric_jax.judge import Judge, JudgeConfig
from rubric_jax.judge.pair_readout import combine_readings, pooled_vals
from rubric_jax.judge.prompts import WORSE_PROMPT, PromptBuilder, PromptConfig
from rubric_jax.rubrics import Criterion

PROMPT = "Write two sentences about a lighthouse keeper."
RESPONSES = [
    "The keeper climbed the stairs at dusk. Her lamp cut through the fog.",
    "A lighthouse stands by the sea and a man lives in it.",
    "Waves. Light. Night again, and the old keeper counts the ships.",
]
CRITERIA = [Criterion(id="clarity", name="Clarity", check="The text is clear and easy to follow.")]


def _logit(p):
    return math.log(p / (1 - p))


def test_combine_readings_by_hand():
    # one pair (0, 1), one criterion; reading A (better question) says P(first wins) 0.8 with 0 first and 0.4
    # with 1 first; reading B (worse question, inverted) says P(first is worse) 0.3 and 0.6
    judged = np.ones((2, 2, 1), bool) & ~np.eye(2, dtype=bool)[:, :, None]
    pa = np.array([[[np.nan], [0.8]], [[0.4], [np.nan]]], np.float32)
    pb = np.array([[[np.nan], [0.3]], [[0.6], [np.nan]]], np.float32)
    valid = judged.copy()
    z = combine_readings([(pa, valid, judged, False, 1.0), (pb, valid, judged, True, 3.0)])
    s_a = (0.8 + 1 - 0.4) / 2  # P(0 beats 1), reading A
    s_b = 1 - (0.3 + 1 - 0.6) / 2  # P(0 beats 1), reading B: 1 - P(0 is worse)
    want = _logit(s_a) + 3 * _logit(s_b)
    np.testing.assert_allclose(z[0, 1, 0], want, rtol=1e-5)
    np.testing.assert_allclose(z[1, 0, 0], -want, rtol=1e-5)
    assert z[0, 0, 0] == 0.0  # the diagonal is not judged: logit(1/2)
    # an order that cannot be read is filled from the other one; both unreadable adds nothing
    valid2 = valid.copy()
    valid2[0, 1, 0] = False
    z2 = combine_readings([(pa, valid2, judged, False, 1.0)])
    np.testing.assert_allclose(z2[0, 1, 0], _logit(0.6), rtol=1e-5)  # f(0,1) := 1 - f(1,0) = 0.6
    z3 = combine_readings([(pa, np.zeros_like(valid), judged, False, 1.0), (pb, valid, judged, True, 3.0)])
    np.testing.assert_allclose(z3[0, 1, 0], 3 * _logit(s_b), rtol=1e-5)
    # the pooled values read back as sigmoid(z) with all probability on the two labels
    v = pooled_vals(z)
    p = np.exp(v[..., 0]) / (np.exp(v[..., 0]) + np.exp(v[..., 1]))
    np.testing.assert_allclose(p[0, 1, 0], 1 / (1 + math.exp(-want)), rtol=1e-5)
    np.testing.assert_allclose(np.logaddexp(v[..., 0], v[..., 1]), v[..., 2], atol=1e-5)


def test_worse_prompt_is_the_text_the_fidelity_study_measured(qwen_tokenizer):
    import dataclasses

    from evals.judge_variants import TEMPLATES, TemplatePromptBuilder

    cfg = PromptConfig(**WORSE_PROMPT)
    ours = PromptBuilder(qwen_tokenizer, cfg)
    # the template the 1.5B's worse_sentence figures were measured with, before the engine had the fields
    measured = dataclasses.replace(TEMPLATES["worse"], cue="The worse response is Response")
    study = TemplatePromptBuilder(qwen_tokenizer, PromptConfig(), measured)
    for gen in (False, True):
        a, b = ours.segments("pair", gen), study.segments("pair", gen)
        assert a == b, gen
        assert ours.suffix("pair", CRITERIA[0], gen) == study.suffix("pair", CRITERIA[0], gen)
    assert ours.fingerprint != PromptBuilder(qwen_tokenizer, PromptConfig()).fingerprint


def test_config_refuses_what_cannot_pool():
    for bad in (dict(questions="worst"), dict(questions="both", mode="generate"),
                dict(questions="worse", pairing="swiss"), dict(questions="both", comparison="listwise"),
                dict(questions="both", worse_weight=0.0), dict(questions="both", worse_weight=float("nan"))):
        with pytest.raises(ValueError):
            JudgeConfig(**bad)
    JudgeConfig(questions="both", mode="sign", pairing="circular")


@pytest.mark.slow
def test_engine_pools_the_two_readings(tiny_qwen3_model, qwen_tokenizer):
    """The engine's worse and both readings equal the formula over two plain judges' probabilities. About 5 s
    on 2 cores: the worse prompt's longer heads compile shapes of their own."""
    better = Judge(tiny_qwen3_model, qwen_tokenizer, mode="logit").pairwise(PROMPT, RESPONSES, CRITERIA)
    worse = Judge(tiny_qwen3_model, qwen_tokenizer, mode="logit", **WORSE_PROMPT).pairwise(PROMPT, RESPONSES,
                                                                                          CRITERIA)
    off = ~np.eye(3, dtype=bool)[:, :, None]
    lg = lambda p: np.log(p / (1 - p))
    both = Judge(tiny_qwen3_model, qwen_tokenizer, mode="logit", questions="both", worse_weight=2.5)
    got = both.pairwise(PROMPT, RESPONSES, CRITERIA)
    want = 1 / (1 + np.exp(-(lg(better.p) + 2.5 * lg(1 - worse.p))))
    np.testing.assert_allclose(np.where(off, got.p, 0.5), np.where(off, want, 0.5), atol=2e-5)
    np.testing.assert_allclose(got.p + np.swapaxes(got.p, 0, 1), 1.0, atol=1e-6)
    assert both.stats.judgments == 2 * 6 * len(CRITERIA)  # both readings, 3 pairs x 2 orders each
    assert 0.0 <= got.metrics["position_bias"] <= 1.0
    only = Judge(tiny_qwen3_model, qwen_tokenizer, mode="logit", questions="worse").pairwise(PROMPT, RESPONSES,
                                                                                            CRITERIA)
    np.testing.assert_allclose(np.where(off, only.p, 0.5), np.where(off, 1 - worse.p, 0.5), atol=2e-5)
    sign = Judge(tiny_qwen3_model, qwen_tokenizer, mode="sign", questions="both", worse_weight=2.5)
    ps = sign.pairwise(PROMPT, RESPONSES, CRITERIA).p
    np.testing.assert_array_equal(np.where(off, ps, 0.5), np.where(off, (want > 0.5).astype(np.float32), 0.5))

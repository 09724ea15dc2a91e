"""config.forward "auto": the update's remat and attention chosen from its own compiled memory (rl.forward_plan)."""

import logging

import pytest

from conftest import load_config
from rubric_jax import PRESETS, init_model
from rubric_jax.models.lora import LoRAConfig, apply_lora
from rubric_jax.rl import forward_plan as fp
from rubric_jax.rl import setup as setup_mod
from rubric_jax.rl.losses import LossConfig
from rubric_jax.rl.policy import Policy, PolicyConfig, make_optimizer


def test_candidates_vary_only_the_auto_fields_fastest_first():
    assert fp.candidates("auto", "auto") == [("none", "plain"), ("none", "chunked"), ("full", "chunked")]
    assert fp.candidates("full", "auto") == [("full", "plain"), ("full", "chunked")]
    assert fp.candidates("auto", "xla") == [("none", "xla"), ("full", "xla")]
    assert fp.candidates("dots_saveable", "plain") == [("dots_saveable", "plain")]
    assert fp.inference_runtime(dict(remat="auto", attention="auto", scan_layers=False)) == dict(
        remat="none", attention="chunked", scan_layers=False)
    assert fp.inference_runtime(dict(remat="full", attention="plain")) == dict(remat="full", attention="plain")


def _policy():
    model = init_model(PRESETS["tiny"].replace(vocab_size=64, attention_chunk=8), seed=0)
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0))
    opt = make_optimizer(1e-3, warmup_steps=0, total_steps=10, schedule="constant")
    return Policy(model, opt, LossConfig(aggregation="dr_grpo", max_completion_len=32), PolicyConfig(micro_batch_size=4))


@pytest.mark.slow
def test_the_plan_keeps_the_fastest_setting_whose_compiled_update_fits(caplog):
    """Six compilations of the tiny model's gradient program (about 20 s on 2 cores): the ordering of the three
    candidates' compiled bytes is what the test is about, so each must really be compiled."""
    policy = _policy()
    shape = dict(rows=4, prompt_width=32, completion_width=32)
    # Nothing fits: every candidate is compiled, the leanest is kept, and the log says it does not fit.
    with caplog.at_level(logging.WARNING, logger="rubric_jax.rl.forward_plan"):
        lean = fp.plan_update_forward(policy, remat="auto", attention="auto", budget_bytes=1, **shape)
    assert (lean.remat, lean.attention, lean.fits) == ("full", "chunked", False)
    assert "DOES NOT FIT" in caplog.text
    assert (policy.model().cfg.remat, policy.model().cfg.attention) == ("full", "chunked")
    need = {(r, a): b for r, a, b in lean.tried}
    assert list(need) == fp.candidates("auto", "auto") and lean.tokens == 64
    # Keeping every layer's 64 x 64 scores costs memory; chunks of 8 queries and recomputation each save some.
    assert need["none", "plain"] > need["none", "chunked"] > need["full", "chunked"]
    # A budget that the chunked update just fits: the fastest that fits, not the leanest.
    mid = fp.plan_update_forward(policy, remat="auto", attention="auto", budget_bytes=need["none", "chunked"], **shape)
    assert (mid.remat, mid.attention, mid.fits, len(mid.tried)) == ("none", "chunked", True, 2)
    assert policy.model().cfg.attention == "chunked" and policy.model().cfg.remat == "none"
    # A fixed field stays as given.
    fixed = fp.plan_update_forward(policy, remat="full", attention="auto", budget_bytes=10 ** 12, **shape)
    assert (fixed.remat, fixed.attention, fixed.fits) == ("full", "plain", True)
    assert policy.model().cfg.remat == "full"


@pytest.mark.slow
def test_a_run_with_auto_plans_its_update_and_loads_the_base_for_inference(tiny_qwen3, caplog):
    c = load_config("rcrl", "tiny")
    c.model = tiny_qwen3[0]
    c.forward.remat = c.forward.attention = "auto"
    with caplog.at_level(logging.INFO, logger="rubric_jax.rl.forward_plan"):
        s = setup_mod.build(c)
    plan = s.forward_plan
    # a tiny model's update fits any machine without recomputation or chunking
    assert (plan.remat, plan.attention, plan.fits) == ("none", "plain", True)
    assert plan.rows == c.loss.micro_batch_size and plan.tokens == s.shapes.prompt_width + c.max_completion_len
    assert "forward: remat=none attention=plain (fits" in caplog.text
    assert (s.policy.model().cfg.remat, s.policy.model().cfg.attention) == ("none", "plain")
    assert (s.base.cfg.remat, s.base.cfg.attention) == ("none", "chunked")
    # explicit settings are not planned
    c.forward.remat, c.forward.attention = "full", "plain"
    s = setup_mod.build(c)
    assert s.forward_plan is None and s.policy.model().cfg.remat == "full"


@pytest.mark.parametrize("value", [0.0, 1.5])
def test_memory_fraction_outside_0_1_is_refused(value):
    from rubric_jax.rl import preflight

    c = load_config("rcrl", "tiny")
    c.forward.memory_fraction = value
    with pytest.raises(preflight.ConfigError, match="forward.memory_fraction"):
        preflight.check(c)

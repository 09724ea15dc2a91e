"""Reward methods as plugins (rubric_jax.methods): the trainer names none of them, configs find theirs by name,
and the worked example of docs/architecture.md (a new method in one module plus one config file) trains."""

import importlib.util
import os
import re
import sys

import numpy as np
import pytest

from rubric_jax import methods
from rubric_jax.methods.base import METHODS
from rubric_jax.methods.terms import TERMS
from rubric_jax.rl import preflight, trainer

from conftest import ROOT, load_config  # noqa: E402


def test_the_trainer_names_no_method_and_no_reward_term():
    """The loop calls the method's protocol only: no method's, term's or schedule's name appears in its source
    (code, strings or comments)."""
    with open(os.path.join(ROOT, "rubric_jax", "rl", "trainer.py"), encoding="utf-8") as f:
        source = f.read()
    names = [*METHODS, *TERMS, "rare", "rlmr", "pacing", "curriculum", "rubric_store", "verifier"]
    named = [n for n in names if re.search(rf"\b{re.escape(n)}\b", source, re.IGNORECASE)]
    assert named == []
    # the check can fail: the trainer's module name itself is found the same way
    assert re.search(r"\btrainer\b", source, re.IGNORECASE)


@pytest.mark.parametrize("name,method", [("rcrl", "rubric"), ("absolute_rar", "rubric"), ("dropout_rar", "rubric"),
                                         ("rcrl_auto_pacing", "rubric"), ("rcrl_listwise", "rubric"),
                                         ("instance_rubric", "per_prompt"), ("rare", "rare"), ("rler", "rare"),
                                         ("rlmr", "rlmr"), ("verifier_only", "rlmr"), ("learn_ifeval", "rlmr")])
def test_each_config_finds_its_method_by_name(name, method):
    cfg = load_config(name, "tiny")
    assert methods.method_name(cfg) == method
    assert isinstance(methods.make(cfg, None, [], None), METHODS[method])


def test_an_unknown_method_fails_the_config_check_naming_the_registered_ones():
    cfg = load_config("rcrl", "tiny")
    cfg.reward.method = "pariwise"
    with pytest.raises(preflight.ConfigError, match=r"config\.reward\.method='pariwise'.*'rare', 'rlmr'.*pairwise"):
        preflight.check(cfg)
    with pytest.raises(ValueError, match="no reward method 'nope'"):
        methods.get("nope")


def test_two_methods_cannot_share_a_name():
    with pytest.raises(ValueError, match="two reward methods are registered as 'rare'"):
        methods.register("rare")(type("Other", (methods.Method,), {}))
    assert METHODS["rare"].__name__ == "RareMethod"


def test_what_a_method_returns_is_checked_naming_it():
    from rubric_jax.methods.base import RewardOut, checked

    ok = RewardOut(np.zeros((2, 4), np.float32), {}, np.zeros(2, bool), {"violate": np.zeros((2, 4), bool)})
    assert checked(ok, "m", 2, 4) is ok
    with pytest.raises(ValueError, match=r"reward method 'm' returned rewards of shape \(8,\) for 2 groups of 4"):
        checked(RewardOut(np.zeros(8, np.float32), {}), "m", 2, 4)
    with pytest.raises(ValueError, match="dtype <U1"):
        checked(RewardOut(np.full((2, 4), "x"), {}), "m", 2, 4)
    with pytest.raises(ValueError, match=r"drop of shape \(4,\)"):
        checked(RewardOut(np.zeros((2, 4)), {}, np.zeros(4, bool)), "m", 2, 4)
    with pytest.raises(ValueError, match=r"picked\['v'\] has shape \(3, 4\)"):
        checked(RewardOut(np.zeros((2, 4)), {}, None, {"v": np.zeros((3, 4))}), "m", 2, 4)


def _doc_blocks(module_marker, config_marker):
    """The worked example's two python blocks in docs/architecture.md: (module, config file)."""
    from doc_blocks import python_block

    return python_block(module_marker), python_block(config_marker)


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_the_worked_example_trains_a_step(tiny_qwen3, tmp_path):
    """The documented module and config, as written, on the tiny random Qwen3: one step, the method's reward
    (mean words / 40 while every answer is under 40 words) and its own metric logged, the judge never asked.
    (About 10 s: one sampler and one update program, shared with the suite's other tiny runs.)"""
    module, config_file = _doc_blocks('@register("word_target")', "# configs/word_target.py")
    (tmp_path / "word_target.py").write_text(module)
    (tmp_path / "word_target_cfg.py").write_text(config_file)
    try:
        _import(str(tmp_path / "word_target.py"), "word_target_example")
        assert "word_target" in methods.method_choices()
        cfg = _import(str(tmp_path / "word_target_cfg.py"), "word_target_example_cfg").get_config("tiny")
        cfg.model, cfg.steps, cfg.max_completion_len, cfg.tensorboard = tiny_qwen3[0], 1, 8, False
        cfg.prompt_width = "max"  # the suite's other tiny runs' programs (test_trainer._tiny_run_config)
        preflight.check(cfg)
        (m,) = trainer.train(cfg, str(tmp_path / "run"))
    finally:
        METHODS.pop("word_target", None)
        for name in ("word_target_example", "word_target_example_cfg"):
            sys.modules.pop(name, None)
    words = m["word_target/words"]
    assert 0 <= words <= 8  # at most 8 tokens each
    np.testing.assert_allclose(m["reward/mean"], words / 40, rtol=1e-5)
    assert m["reward/judge_mean"] == m["reward/mean"] and "active_criteria" not in m
    assert m["time/judge_padded_tokens"] == 0.0  # nothing was judged


@pytest.mark.slow
def test_the_worked_reward_term_adds_its_standardised_bonus(tiny_qwen3, tmp_path):
    """The documented reward term (a function) and its config file, as written: one RcRL step on the tiny random
    Qwen3 logs bonus/brevity, the mean of minus the completions' lengths, and the standardised bonus adds nothing
    to the mean reward (it is zero-mean in each group). (About 10 s, the suite's shared tiny programs.)"""
    from rubric_jax.methods.terms import TERMS

    module, config_file = _doc_blocks('@term("brevity")', "# configs/rcrl_brevity.py")
    (tmp_path / "brevity.py").write_text(module)
    (tmp_path / "brevity_cfg.py").write_text(config_file)
    try:
        _import(str(tmp_path / "brevity.py"), "brevity_example")
        cfg = _import(str(tmp_path / "brevity_cfg.py"), "brevity_example_cfg").get_config("tiny")
        cfg.model, cfg.steps, cfg.max_completion_len, cfg.tensorboard = tiny_qwen3[0], 1, 8, False
        cfg.prompt_width = "max"
        preflight.check(cfg)
        (m,) = trainer.train(cfg, str(tmp_path / "run"))
        with pytest.raises(preflight.ConfigError, match=r"config\.reward: unknown setting\(s\) \['brevty_coef'\]"):
            bad = _import(str(tmp_path / "brevity_cfg.py"), "brevity_example_cfg2").get_config("tiny")
            with bad.unlocked():
                bad.reward.brevty_coef = 0.1  # a term that is not registered
            preflight.check(bad)
    finally:
        TERMS.pop("brevity", None)
        for name in ("brevity_example", "brevity_example_cfg", "brevity_example_cfg2"):
            sys.modules.pop(name, None)
    np.testing.assert_allclose(m["bonus/brevity"], -m["completion_len/mean"], rtol=1e-6)
    np.testing.assert_allclose(m["reward/mean"], m["reward/judge_mean"], atol=1e-6)

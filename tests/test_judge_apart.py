"""config.judge.model: a frozen judge apart from the policy, with its own tokenizer.

The policy is the tiny random Qwen3 (Qwen's 152k-word tokenizer); the judge a tiny random Llama whose tokenizer is
a 285-token byte-level BPE written here, so every judge prompt encodes to ids the policy's vocabulary would read
differently. One training step (shared by the tests below) runs with that judge; a setup without judge.model is
the self-judging control.
"""

import json
import logging
import os

import jax
import numpy as np
import pytest
from flax import nnx

from rubric_jax.judge import Judge, JudgeConfig
from rubric_jax.methods.rcrl import method as rubric_method
from rubric_jax.models.loading import load_model
from rubric_jax.models.tokenizer import load_tokenizer
from rubric_jax.rl import setup as setup_mod, trainer, preflight
from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.methods.rcrl.reward import judge_rewards, reachable_criteria

from conftest import load_config, write_tiny_checkpoint  # noqa: E402
from test_trainer import _tiny_run_config  # noqa: E402

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def write_byte_tokenizer(out_dir):
    """A byte-level BPE of 256 bytes, the merges " A".." Z" (the judge's verdict labels are one token each) and
    ChatML's special tokens: built in milliseconds, nothing like Qwen's vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = [("Ġ", chr(c)) for c in range(ord("A"), ord("Z") + 1)]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML
    fast.save_pretrained(out_dir)


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("judge_llama"))
    write_tiny_checkpoint(d, "llama", tied=False, seed=7, vocab_size=320, max_position_embeddings=4096)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):  # Qwen's, copied beside it
        os.remove(os.path.join(d, f))
    write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="module")
def run(tiny_qwen3, judge_dir, tmp_path_factory):
    """One rcrl :tiny step judged by the Llama: (its setup, history, workdir, the judge_rewards call it made)."""
    wd = str(tmp_path_factory.mktemp("judged_run"))
    cfg = _tiny_run_config("rcrl", tiny_qwen3[0], steps=1, **{"judge.model": judge_dir})
    built, calls = [], []

    def build(c):
        built.append(setup_mod.build(c))
        return built[-1]

    def spy(judge, prompts, responses, criteria, weights, cfg, **kw):
        r, rows = judge_rewards(judge, prompts, responses, criteria, weights, cfg, **kw)
        calls.append((judge, prompts, responses, criteria, weights, cfg, kw, r))
        return r, rows

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer, "build", build)
        mp.setattr(rubric_method, "judge_rewards", spy)
        hist = trainer.train(cfg, wd)
    return built[0], hist, wd, calls[0]


@pytest.fixture(scope="module")
def self_judged(tiny_qwen3):
    """The same config without judge.model: the policy judges itself."""
    return setup_mod.build(_tiny_run_config("rcrl", tiny_qwen3[0], steps=1))


def _policy_params(setup):
    return sum(int(x.size) for x in jax.tree.leaves(setup.policy.trainable))


@pytest.mark.slow
def test_a_training_step_judges_with_the_other_model_and_trains_only_the_policy(run, self_judged, judge_dir):
    setup, hist, wd, (judge, *_) = run
    assert [m["step"] for m in hist] == [0] and np.isfinite(hist[0]["loss"])
    assert hist[0]["reward/judge_mean"] == pytest.approx(0.5, abs=1e-5)  # win rates: 1/2 per group
    assert judge is setup.judge and setup.judge_apart and not self_judged.judge_apart
    assert setup.judge.model is setup.judge_model and setup.judge_model is not setup.base
    assert setup.judge.tokenizer is setup.judge_tokenizer and setup.judge_tokenizer is not setup.tokenizer
    assert (setup.judge_model.cfg.arch, setup.base.cfg.arch) == ("llama", "qwen3")
    assert setup.judge_tokenizer.vocab_size < 400 < setup.tokenizer.vocab_size
    assert self_judged.judge.model is self_judged.base and self_judged.judge.tokenizer is self_judged.tokenizer
    # frozen: no adapters on the judge, and the policy trains exactly what it trains when it judges itself
    assert not jax.tree.leaves(nnx.state(setup.judge_model, nnx.LoRAParam))
    assert _policy_params(setup) == _policy_params(self_judged) > 0
    ckpt = Checkpointer(wd)
    _, meta = ckpt.restore()
    ckpt.close()
    assert meta["judge"] == {"model": judge_dir, "id": setup.judge.model_id}
    with open(os.path.join(wd, "config.json")) as f:
        assert json.load(f)["judge"]["model"] == judge_dir


@pytest.mark.slow
def test_the_judge_apart_scores_as_a_judge_built_on_its_model_and_not_as_the_self_judge(run, self_judged, judge_dir):
    setup, _, _, (_, prompts, responses, criteria, weights, cfg, kw, r) = run
    jc = setup.config.judge
    direct = Judge(load_model(judge_dir), load_tokenizer(judge_dir), JudgeConfig(mode=jc.mode, pairing=jc.pairing),
                   max_response_tokens=jc.max_response_tokens)
    direct.reserve(reachable_criteria(criteria, cfg, setup.config.steps))  # as build does: the same shapes
    r_direct, _ = judge_rewards(direct, prompts, responses, criteria, weights, cfg, **kw)
    np.testing.assert_array_equal(r, r_direct)  # the step's rewards are that judge's
    crit = [c for c, w in zip(criteria, weights) if w > 0]  # the step's active criteria: its compiled shapes
    soft = lambda j: np.stack([x.p_first for x in j.pairwise_batch(prompts, responses, crit, mode="logit")])
    apart, by_hand, itself = soft(setup.judge), soft(direct), soft(self_judged.judge)
    np.testing.assert_allclose(apart, by_hand, atol=1e-6)
    judged = ~np.isnan(apart)
    assert judged.any() and np.abs(apart[judged] - itself[judged]).max() > 1e-3  # another model reads them


@pytest.mark.slow
def test_the_start_up_summary_says_which_model_judges(run, self_judged, judge_dir):
    setup = run[0]
    n = sum(int(x.size) for x in jax.tree.leaves(nnx.state(setup.judge_model, nnx.Param)))
    mib = sum(int(x.nbytes) for x in jax.tree.leaves(nnx.state(setup.judge_model, nnx.Param))) / 2 ** 20
    lines, _ = setup_mod.run_summary(setup)
    assert (f"judge: {judge_dir} (llama, {n / 1e6:.1f}M parameters, float32, {mib:.1f} MiB of weights, "
            f"its own tokenizer)") in lines
    lines, _ = setup_mod.run_summary(self_judged)
    assert [x for x in lines if x.startswith("judge: ")] == [
        f"judge: the policy's frozen base ({self_judged.config.model}, self-judging: no second copy)"]


@pytest.mark.slow
def test_a_resume_with_another_judge_says_the_reward_changed(run, self_judged, caplog):
    """Nothing restored depends on the judge, so the resume goes on; the log names both judges."""
    wd = run[2]
    with Checkpointer(wd) as ckpt, caplog.at_level(logging.WARNING, logger=trainer.__name__):
        assert trainer._restore(self_judged, ckpt) == 1
    warned = [r.getMessage() for r in caplog.records if "rewarded by judge" in r.getMessage()]
    assert len(warned) == 1 and run[0].judge.model_id in warned[0] and self_judged.judge.model_id in warned[0]
    caplog.clear()
    with Checkpointer(wd) as ckpt, caplog.at_level(logging.WARNING, logger=trainer.__name__):
        trainer._restore(run[0], ckpt)  # the same judge: nothing to say
    assert not [r for r in caplog.records if "rewarded by judge" in r.getMessage()]


def test_rlmr_pacing_and_rare_read_the_judge_apart(tiny_qwen3, judge_dir):
    """RLMR's writing judge and LLM verifier, the pacing judge and RARE's scorer (and its retry) all read the
    judge model; RARE's criterion writer stays on the policy's base."""
    s = setup_mod.build(_tiny_run_config("rlmr", tiny_qwen3[0], **{"judge.model": judge_dir}))
    assert s.method.rt.verifier.judge is s.judge and s.judge.model is s.judge_model is not s.base
    s = setup_mod.build(_tiny_run_config("rcrl", tiny_qwen3[0], **{"judge.model": judge_dir,
                                                                   "reward.pacing": "monitor"}))
    pacing_judge = s.method.pacing_judge
    assert pacing_judge.model is s.judge_model is not s.base and pacing_judge.tokenizer is s.judge_tokenizer
    s = setup_mod.build(_tiny_run_config("rare", tiny_qwen3[0], **{"judge.model": judge_dir}))
    scorer = s.method.rt.scorer
    assert scorer.judge.model is s.judge_model and scorer.judge.tokenizer is s.judge_tokenizer
    assert scorer.retry_judge.model is s.judge_model and scorer.judge.model_id == s.judge_id
    assert s.method.judge is scorer.judge and s.judge_model is not s.base


BAD = [({"judge.model": "/no/such/judge"}, "config.judge.model='/no/such/judge': no such checkpoint path"),
       ({"judge.model": "gpt-7"}, "config.judge.model='gpt-7': .*not an embedded model name"),
       ({"judge.model": __file__}, "config.judge.model=.*not a .gguf checkpoint"),
       ({"judge.model": "smollm2", "judge.dtype": "float8"}, "config.judge.dtype='float8': must be one of"),
       ({"judge.dtype": "bfloat16"}, "config.judge.dtype='bfloat16': the self-judge")]


@pytest.mark.parametrize("over,message", BAD, ids=["missing_path", "unknown_name", "not_a_checkpoint_file",
                                                   "bad_dtype", "dtype_without_a_judge"])
def test_validate_rejects_a_judge_it_cannot_load_naming_the_key(over, message, monkeypatch, tmp_path):
    c = load_config("rcrl", "tiny")
    for k, v in over.items():
        c.judge[k.split(".")[1]] = v
    with pytest.raises(preflight.ConfigError, match=message):
        preflight.check(c)

    def no_load(*a, **k):
        raise AssertionError("a model was loaded before the config was checked")

    monkeypatch.setattr(setup_mod, "load_model", no_load)
    with pytest.raises(preflight.ConfigError):
        setup_mod.build(c)


def test_validate_accepts_an_embedded_name_a_directory_and_the_policys_dtype(judge_dir):
    for over in ({"model": "smollm2", "dtype": "bfloat16"}, {"model": judge_dir}, {"dtype": "float32"}, {}):
        c = load_config("rcrl", "tiny")
        for k, v in over.items():
            c.judge[k] = v
        preflight.check(c)

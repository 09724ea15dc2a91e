"""diagnostics suite: entropy recording around evals.generate (fake sampler), tables, and an end-to-end run on
a tiny random checkpoint against its own word-shuffled answers."""

import json
import math
import os

import numpy as np
import pytest

import evals.generate as gen
from evals.suites import diagnostics as D


class _Tok:
    eos_ids = (0,)
    pad_id = 0

    def encode_chat(self, text, system=None):
        return [1 + (ord(c) % 50) for c in text]

    def encode(self, text):
        return [1 + (ord(c) % 50) for c in text]

    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


class _Member:
    def __init__(self, fp):
        from evals.models import MemberSpec

        self.spec = MemberSpec("hf", "/fake")
        self.fingerprint = fp
        self.model = object()
        self.tokenizer = _Tok()


def _sampler(calls):
    """Three tokens per row; each token's entropy is len(row) / 10, so an answer's mean entropy is known."""
    from rubric_jax.sampling.sampler import SampleOutput

    def fake_sample(model, rows, *, max_new_tokens, prompt_keys, prompt_length, **kw):
        calls.append(len(rows))
        n = len(rows)
        toks = np.asarray([[len(r) + 1, 7, 9] for r in rows], np.int32)
        ent = np.asarray([[len(r) / 10] * 3 for r in rows], np.float32)
        return SampleOutput(tokens=toks, lengths=np.full(n, 3), logprobs=np.zeros((n, 3)), entropy=ent,
                            prompt_tokens=None, prompt_mask=None, num_samples=1)

    return fake_sample


def test_entropy_recorded_cached_and_recovered(tmp_path, monkeypatch):
    calls = []
    fake = _sampler(calls)
    monkeypatch.setattr(gen, "sample", fake)
    prompts = ["ab", "abcd", "abcdefgh"]
    kw = dict(seed=0, settings=gen.GenSettings(max_new_tokens=3), cache_dir=str(tmp_path), batch_size=2,
              progress=False, desc="")
    texts, ents = D.answers_with_entropy(_Member("fp"), prompts, **kw)
    assert texts == gen.generate_answers(_Member("fp"), prompts, **{k: v for k, v in kw.items() if k != "desc"})
    assert [e[1] for e in ents] == [3, 3, 3]
    np.testing.assert_allclose([e[0] for e in ents], [3 * len(p) / 10 for p in prompts], rtol=1e-6)
    assert gen.sample is fake and calls == [2, 2]  # the wrapper is gone again; padded batches
    assert D.mean_token_entropy(ents) == pytest.approx(np.mean([len(p) / 10 for p in prompts]), rel=1e-6)
    # everything cached: no sampling at all
    assert D.answers_with_entropy(_Member("fp"), prompts, **kw) == (texts, ents)
    assert calls == [2, 2]
    # answers cached by another suite (no entropy): sampled once more, entropies recovered, answers unchanged
    import shutil

    shutil.rmtree(tmp_path / "entropy")
    t2, e2 = D.answers_with_entropy(_Member("fp"), prompts, **kw)
    assert t2 == texts and e2 == ents and len(calls) == 4


def test_entropy_not_taken_from_a_different_answer(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(gen, "sample", _sampler(calls))
    kw = dict(seed=0, settings=gen.GenSettings(max_new_tokens=3), cache_dir=str(tmp_path), batch_size=2,
              progress=False, desc="")
    m = _Member("fp")
    gen.generate_answers(m, ["abc"], **{k: v for k, v in kw.items() if k != "desc"})
    key = gen.answer_key("fp", "abc", 0, kw["settings"])
    gen.DiskCache(str(tmp_path), "answers").put(key, {"text": "some other answer"})
    texts, ents = D.answers_with_entropy(m, ["abc"], **kw)
    assert texts == ["some other answer"] and ents == [None]
    assert math.isnan(D.mean_token_entropy(ents))


def test_mean_token_entropy_is_token_weighted():
    assert D.mean_token_entropy([(3.0, 3), (1.0, 1), None]) == pytest.approx(1.0)
    assert D.mean_token_entropy([(6.0, 2), (0.0, 1)]) == pytest.approx(2.0)
    assert math.isnan(D.mean_token_entropy([None]))


def test_contestant_metrics_use_the_trainer_names():
    texts = ["the cat the cat sat", "a dog ran", "the cat sat down"]
    m = D.contestant_metrics(texts, ["p", "p", "q"], None, [(2.0, 4), (1.0, 2), None])
    for k in ("diversity/distinct_1", "diversity/distinct_2", "diversity/distinct_3", "repetition/ngram_3",
              "repetition/overused_3", "completion_words/mean", "policy_entropy"):
        assert k in m
    assert m["policy_entropy"] == pytest.approx(0.5)
    # group p: 8 words, distinct {the, cat, sat, a, dog, ran} = 6 -> 0.75; group q: 4 of 4 -> 1
    assert m["diversity/distinct_1"] == pytest.approx((0.75 + 1.0) / 2)
    assert math.isnan(D.contestant_metrics(texts, None, None, None)["policy_entropy"])


def test_table_and_plot(tmp_path):
    res = {"a": {k: 0.25 for k in D.METRICS}, "b|c": {**{k: 0.5 for k in D.METRICS}, "policy_entropy": math.nan}}
    t = D.format_table(res).splitlines()
    assert len(t) == 4 and all(k in t[0] for k in D.METRICS)
    assert t[2].startswith("| a | 0.25 |") and t[3].rstrip().endswith("| n/a |")
    p = D.plot(res, str(tmp_path / "d.png"), "t")
    assert os.path.getsize(p) > 1000


@pytest.mark.slow
def test_diagnostics_end_to_end_on_a_tiny_checkpoint(tmp_path, tiny_qwen3):
    """The suite end to end on a tiny random checkpoint: what is asserted (shuffling keeps each text's words,
    the sampled answers carry a policy entropy, the shuffled ones none) holds for any model."""
    from evals.run import main
    from rubric_jax.rl.diagnostics import words

    ckpt = tiny_qwen3[0]
    vocab = json.loads(open(os.path.join(ckpt, "config.json")).read())["vocab_size"]
    out = tmp_path / "out"
    rc = main(["--suite=diagnostics", f"--models=base={ckpt},shuf=shuffled:{ckpt}",
               f"--out={out}", "--prompts=3", "--samples=2", "--max_new_tokens=32",
               f"--cache_dir={tmp_path / 'cache'}", "--quiet"])
    assert rc == 0
    for f in ("results.json", "report.md", "diagnostics.png", "answers.jsonl"):
        assert os.path.getsize(out / f) > 0
    r = json.loads((out / "results.json").read_text())
    base, shuf = r["models"]["base"], r["models"]["shuf"]
    assert set(D.METRICS) <= set(base)
    # shuffling words keeps each text's words: unigram figures and lengths in words are equal
    for k in ("diversity/distinct_1", "completion_words/mean", "completion_words/median", "empty_completions",
              "foreign_script_word_rate"):
        assert shuf[k] == pytest.approx(base[k]), k
    # the policy sampled the base answers; the shuffled ones were never sampled in that order
    assert 0.0 < base["policy_entropy"] < math.log(vocab)
    assert shuf["policy_entropy"] is None
    assert base["completion_len/mean"] > 0 and base["completion_words/mean"] > 0
    rows = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        a, b = row["answers"]["base"], row["answers"]["shuf"]
        assert len(a) == len(b) == 2
        assert all(sorted(words(x)) == sorted(words(y)) for x, y in zip(a, b))
        assert any(x != y for x, y in zip(a, b))
    md = (out / "report.md").read_text()
    assert "| base |" in md and "| shuf |" in md and "n/a" in md

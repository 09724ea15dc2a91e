"""evals: model specs, the generation cache, shuffled answers, the eval prompt set, and real small runs."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------
# Model specs


def _hf_dir(path):
    os.makedirs(path, exist_ok=True)
    open(os.path.join(path, "config.json"), "w").write("{}")
    open(os.path.join(path, "model.safetensors"), "wb").write(b"weights")
    return str(path)


def test_model_spec_parsing(tmp_path):
    from evals.models import parse_models

    hf = _hf_dir(tmp_path / "hf")
    gg = tmp_path / "m.gguf"
    gg.write_bytes(b"gguf")
    wd = tmp_path / "run"
    (wd / "checkpoints" / "3").mkdir(parents=True)
    (wd / "config.json").write_text(json.dumps({"model": hf}))
    wd2 = tmp_path / "run2"
    (wd2 / "checkpoints" / "1").mkdir(parents=True)
    (wd2 / "config.json").write_text(json.dumps({"model": hf}))
    ad = tmp_path / "adapter"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": hf, "r": 4}))
    (ad / "adapter_model.safetensors").write_bytes(b"x")

    cs = parse_models(f"base=smollm2-135m-instruct,h={hf},g={gg},t={wd}+{wd2},a={ad},s=shuffled:{hf}")
    kinds = {c.name: [m.kind for m in c.members] for c in cs}
    assert kinds == {"base": ["embedded"], "h": ["hf"], "g": ["gguf"], "t": ["workdir", "workdir"], "a": ["peft"],
                     "s": ["hf"]}
    by = {c.name: c for c in cs}
    assert by["s"].members[0].shuffled and not by["h"].members[0].shuffled
    assert by["a"].members[0].base == os.path.abspath(hf)
    # a bare spec is named after its last path component
    assert parse_models(f"{hf},smollm2")[0].name == "hf"


@pytest.mark.parametrize("spec,msg", [
    ("", "at least two"),
    ("a=smollm2,a=smollm2-135m-instruct", "duplicate name"),
    ("a=/no/such/dir", "no such file"),
    ("a=nonexistent-model-name", "not an embedded"),
    ("=smollm2", "empty name"),
    ("a=smollm2,,b=smollm2", "empty entry"),
    ("a=smollm2+", "empty member"),
    ("a=shuffled:shuffled:smollm2", "nested"),
    ("a=openai:gpt@http://x", "remote"),
])
def test_model_spec_errors(spec, msg):
    from evals.models import ModelSpecError, parse_models

    with pytest.raises(ModelSpecError, match=msg):
        parse_models(spec)


def test_model_spec_errors_on_disk(tmp_path):
    from evals.models import ModelSpecError, parse_models

    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSpecError, match="neither"):
        parse_models(f"a={tmp_path / 'empty'}")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelSpecError, match="not a .gguf"):
        parse_models(f"a={tmp_path / 'notes.txt'}")
    ad = tmp_path / "adapter"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"r": 4}))
    (ad / "adapter_model.safetensors").write_bytes(b"x")
    with pytest.raises(ModelSpecError, match="--base"):
        parse_models(f"a={ad}")
    assert parse_models(f"a={ad}", base="smollm2")[0].members[0].base == "smollm2"
    wd = tmp_path / "run"
    (wd / "checkpoints").mkdir(parents=True)
    (wd / "config.json").write_text("{}")
    with pytest.raises(ModelSpecError, match="without any checkpoint"):
        parse_models(f"a={wd}")


@pytest.mark.slow
def test_cli_reports_bad_specs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "evals.run", "--models=a=/no/such/model,b=smollm2", "--judge=smollm2",
                        f"--out={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "error:" in r.stderr and "/no/such/model" in r.stderr


def test_fingerprint_is_over_weights_not_path(tmp_path):
    from evals.models import LoadedMember, classify

    a = _hf_dir(tmp_path / "a")
    b = _hf_dir(tmp_path / "b")  # same bytes, other path
    fa = LoadedMember(classify(a), str(tmp_path / "cache")).fingerprint
    fb = LoadedMember(classify(b), str(tmp_path / "cache")).fingerprint
    assert fa == fb and len(fa) == 64
    open(os.path.join(b, "model.safetensors"), "wb").write(b"weightz")  # retrained: same size, new bytes
    os.utime(os.path.join(b, "model.safetensors"), ns=(1, 1))
    assert LoadedMember(classify(b), str(tmp_path / "cache")).fingerprint != fa


def test_local_verdict_and_score_caches_are_keyed_by_the_judge_prompt(tmp_path, monkeypatch):
    """A changed judge prompt (e.g. a new default cue) must not be served verdicts cached under the old one."""
    from evals.judges import LocalJudge
    from evals.scorers import LocalScorer
    from rubric_jax.judge import prompts

    d = _hf_dir(tmp_path / "a")
    before = LocalJudge(d, str(tmp_path / "cache")).fingerprint, LocalScorer(d, str(tmp_path / "cache")).fingerprint
    assert before == (LocalJudge(d, str(tmp_path / "cache")).fingerprint,
                      LocalScorer(d, str(tmp_path / "cache")).fingerprint)
    monkeypatch.setattr(prompts.PromptConfig, "fingerprint", lambda self: "another prompt text")
    after = LocalJudge(d, str(tmp_path / "cache")).fingerprint, LocalScorer(d, str(tmp_path / "cache")).fingerprint
    assert after[0] != before[0] and after[1] != before[1]


@pytest.mark.slow
def test_local_judge_asked_both_questions_reads_the_engines_pooled_preference(tiny_qwen3, tmp_path):
    """--judge_questions=both: each ordered pair gets the engine's pooled p(i > j) (the same in both orders, so
    p(i > j) + p(j > i) = 1), its cache key differs from the default question's, and a question the engine
    does not know is refused."""
    from evals.judges import OVERALL, LocalJudge
    from rubric_jax.judge import Judge, JudgeConfig

    cache = str(tmp_path / "cache")
    plain, both = LocalJudge(tiny_qwen3[0], cache), LocalJudge(tiny_qwen3[0], cache, questions="both")
    assert plain.fingerprint != both.fingerprint
    answers = ["A short tale of a fox.", "Another story, about a heron and a pond.", "Rain."]
    pairs = [(0, 1), (1, 0), (2, 0)]
    got = both.p_first("Write a story.", answers, pairs, [OVERALL])[:, 0]
    ref = Judge(both.member.model, both.member.tokenizer, JudgeConfig(mode="logit", questions="both"),
                max_response_tokens=512).pairwise_batch(["Write a story."], [answers], [OVERALL], mode="logit",
                                                        pairing="all")[0].p[..., 0]
    np.testing.assert_allclose(got, [ref[0, 1], ref[1, 0], ref[2, 0]], atol=1e-6)
    assert got[0] + got[1] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="--judge_questions: expected one of better, worse, both"):
        LocalJudge(tiny_qwen3[0], cache, questions="often")



def test_every_pairwise_suite_asks_its_judge_through_one_door(monkeypatch):
    """evals.judges.suite_judge hands an in-process judge the --judge_questions choice and a remote one the
    client settings; every suite that asks a pairwise question builds its judge there (a suite calling
    make_judge itself would ask the default question whatever the command line said)."""
    import evals.judges as J
    from evals.run import PAIRWISE_SUITES, parse_args

    made = []
    monkeypatch.setattr(J, "LocalJudge", lambda spec, cache, **kw: made.append(("local", spec, kw)))
    monkeypatch.setattr(J, "RemoteJudge", lambda spec, cache, **kw: made.append(("remote", spec, kw)))
    for suite in PAIRWISE_SUITES:
        args = parse_args([f"--suite={suite}", "--models=a=smollm2", "--out=/x", "--judge_questions=both",
                           "--remote_timeout=7", "--remote_retries=2", "--remote_concurrency=3"])
        J.suite_judge(args, "smollm2-135m-instruct", "/c")
        J.suite_judge(args, "openai:m@http://h/v1", "/c")
    assert made[0] == ("local", "smollm2-135m-instruct", {"questions": "both"})
    assert made[1] == ("remote", "openai:m@http://h/v1", {"timeout_s": 7.0, "max_retries": 2, "concurrency": 3})
    assert made == made[:2] * len(PAIRWISE_SUITES)
    suites_dir = os.path.join(ROOT, "evals", "suites")
    for name in sorted(os.listdir(suites_dir)):
        if name.endswith(".py"):
            assert "make_judge(" not in open(os.path.join(suites_dir, name)).read(), name

# ---------------------------------------------------------------------------------------------
# Generation cache


class _FakeTok:
    eos_ids = (0,)
    pad_id = 0

    def encode_chat(self, text, system=None):
        return [1 + (ord(c) % 50) for c in text[: 5 + len(text) % 7]]

    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


class _FakeMember:
    def __init__(self, fp):
        from evals.models import MemberSpec

        self.spec = MemberSpec("hf", "/fake")
        self.fingerprint = fp
        self.model = object()
        self.tokenizer = _FakeTok()


def _counting_sampler(calls):
    from rubric_jax.sampling.sampler import SampleOutput

    def fake_sample(model, rows, *, max_new_tokens, prompt_keys, prompt_length, **kw):
        calls.append((len(rows), prompt_length))
        toks = np.asarray([[len(r) + 1, 7, 9] for r in rows], np.int32)
        n = len(rows)
        return SampleOutput(tokens=toks, lengths=np.full(n, 3), logprobs=np.zeros((n, 3)), entropy=np.zeros((n, 3)),
                            prompt_tokens=None, prompt_mask=None, num_samples=1)

    return fake_sample


def test_generation_cache(tmp_path, monkeypatch):
    import evals.generate as gen

    calls = []
    monkeypatch.setattr(gen, "sample", _counting_sampler(calls))
    prompts = [f"prompt number {i} " + "x" * i for i in range(7)]
    s = gen.GenSettings(max_new_tokens=3)
    kw = dict(seed=0, settings=s, cache_dir=str(tmp_path), batch_size=4, progress=False)
    first = gen.generate_answers(_FakeMember("fp1"), prompts, **kw)
    assert len(calls) == 2 and all(rows == 4 for rows, _ in calls)  # fixed batch size: padded rows
    assert all(a.startswith("w") for a in first)
    n = len(calls)
    assert gen.generate_answers(_FakeMember("fp1"), prompts, **kw) == first
    assert len(calls) == n  # second run: no sampler call
    gen.generate_answers(_FakeMember("fp1"), prompts + ["a new prompt"], **kw)
    assert len(calls) == n + 1  # only the new prompt is sampled
    gen.generate_answers(_FakeMember("fp2"), prompts, **kw)  # new weights: everything misses
    assert len(calls) == n + 3
    gen.generate_answers(_FakeMember("fp1"), prompts, **dict(kw, seed=1))  # other seed misses too
    assert len(calls) == n + 5
    gen.generate_answers(_FakeMember("fp1"), prompts, **dict(kw, settings=gen.GenSettings(max_new_tokens=4)))
    assert len(calls) == n + 7


def test_shuffled_words():
    from evals.generate import shuffle_words

    text = "the quick brown fox jumps over the lazy dog near the river bank today"
    out = shuffle_words(text, (0, "p"))
    assert out != text
    assert sorted(out.split()) == sorted(text.split())
    assert shuffle_words(text, (0, "p")) == out  # seeded
    assert shuffle_words(text, (1, "p")) != out
    assert shuffle_words("same same", 0) == "same same"


def test_shuffled_member_uses_inner_answers(tmp_path, monkeypatch):
    import evals.generate as gen
    from evals.models import ShuffledMember

    calls = []
    monkeypatch.setattr(gen, "sample", _counting_sampler(calls))
    inner = _FakeMember("fp1")
    inner.tokenizer.decode = lambda ids: "alpha beta gamma delta epsilon zeta eta theta"
    kw = dict(seed=0, settings=gen.GenSettings(max_new_tokens=3), cache_dir=str(tmp_path), progress=False)
    plain = gen.generate_answers(inner, ["p1", "p2"], **kw)
    shuf = gen.generate_answers(ShuffledMember(inner), ["p1", "p2"], **kw)
    assert len(calls) == 1  # the shuffled contestant reuses the cached answers
    for a, b in zip(plain, shuf):
        assert a != b and sorted(a.split()) == sorted(b.split())
    assert ShuffledMember(inner).fingerprint != inner.fingerprint


# ---------------------------------------------------------------------------------------------
# Judges


def test_remote_verdict_parsing():
    from rubric_jax.judge.remote import p_from_completion

    assert p_from_completion("A", [{"A": -0.1, "B": -2.4}]) == pytest.approx(1 / (1 + np.exp(-2.3)))
    assert p_from_completion("B", [{" B": -0.1, "b": -9.0, "A": -3.0}]) < 0.1
    assert p_from_completion("Answer: B", None) == 0.0
    assert p_from_completion("A.", []) == 1.0
    assert p_from_completion("I cannot decide", None) is None


def test_criteria_specs():
    from evals.judges import OVERALL, parse_criteria

    assert parse_criteria("overall") == [OVERALL]
    assert len(parse_criteria("rubric:creative_writing")) > 1
    with pytest.raises(ValueError, match="overall"):
        parse_criteria("everything")
    # a run's curriculum criteria, in the order named
    got = parse_criteria("rubric:creative_writing@plot_coherence, prompt_alignment")
    assert [c.id for c in got] == ["plot_coherence", "prompt_alignment"]
    with pytest.raises(ValueError, match="no criterion 'plot_coherense'; did you mean 'plot_coherence'"):
        parse_criteria("rubric:creative_writing@plot_coherense")
    with pytest.raises(ValueError, match="name each criterion once"):
        parse_criteria("rubric:creative_writing@plot_coherence,plot_coherence")


def test_pairwise_elo_gives_each_criterion_its_own_win_rate_with_intervals(tmp_path):
    """collect keeps each criterion's preference beside their mean; per-criterion win rates are read from
    them. The judge double prefers the answer that starts with "T" on c0 (0.8 when shown first, 0.2 when
    shown second) and the other one on c1 (0.3 / 0.7): trained over base is 0.8 on c0 and 0.3 on c1,
    on every prompt, so every bootstrap replicate agrees; the mean over criteria is 0.55."""
    from evals.report import render_markdown
    from evals.suites.pairwise_elo import collect, format_table, per_criterion_win_rates
    from rubric_jax.rubrics.types import Criterion

    crit = [Criterion(id="c0", name="C0", check="x"), Criterion(id="c1", name="C1", check="y")]

    class Judge:
        def p_first(self, prompt, texts, pairs, criteria):
            first_t = np.array([texts[i].startswith("T") for i, _ in pairs])
            return np.stack([np.where(first_t, 0.8, 0.2), np.where(first_t, 0.3, 0.7)], axis=1)

    prompts = [f"p{q}" for q in range(6)]
    answers = {"base": [[f"B{q}" for q in range(6)]], "trained": [[f"T{q}" for q in range(6)]]}
    comps = collect(prompts, answers, [("j", Judge())], crit, progress=False)
    assert comps["p_c"].shape == (12, 2)
    np.testing.assert_allclose(comps["p_a"], comps["p_c"].mean(axis=1))
    per = per_criterion_win_rates(comps, ["base", "trained"], crit, reps=50, seed=0)
    for cid, w in (("c0", 0.8), ("c1", 0.3)):
        assert per[cid]["matrix"][1][0] == pytest.approx(w) and per[cid]["matrix"][0][1] == pytest.approx(1 - w)
        assert per[cid]["lo"][1][0] == pytest.approx(w) and per[cid]["hi"][1][0] == pytest.approx(w)
    from evals.bradley_terry import rate

    res = rate(comps, ["base", "trained"], bootstrap_reps=50, seed=0)
    res["per_criterion"] = per
    assert res["win_rate"]["matrix"][1][0] == pytest.approx(0.55)
    table = format_table(res)
    assert "win rate: trained over base 0.550 [0.550, 0.550]" in table
    assert "win rate on c1: trained over base 0.300 [0.300, 0.300]" in table
    md = render_markdown(res, title="t")
    assert "## Win rates per criterion" in md and "| c0 | trained | base | 80.0 [80.0, 80.0] |" in md


# ---------------------------------------------------------------------------------------------
# The eval prompt set


def _norm(s):
    return " ".join(re.findall(r"[a-z0-9]+", s.lower()))


def test_eval_prompts_are_disjoint_from_training():
    def load(p):
        return [json.loads(line) for line in open(p) if line.strip()]

    train = load(os.path.join(ROOT, "rubric_jax", "data", "creative_writing.jsonl"))
    ev = load(os.path.join(ROOT, "evals", "data", "creative_writing_eval.jsonl"))
    assert len(ev) >= 48
    assert len({r["id"] for r in ev}) == len(ev) and len({_norm(r["prompt"]) for r in ev}) == len(ev)
    for r in ev:
        assert set(r) >= {"id", "task", "prompt", "meta"} and r["task"] == "creative_writing"
    assert len({r["meta"]["form"] for r in ev}) >= 5  # stories, poems, scenes, letters, monologues, ...
    tn = {_norm(r["prompt"]) for r in train}
    tw = [set(_norm(r["prompt"]).split()) for r in train]
    for r in ev:
        n = _norm(r["prompt"])
        assert n not in tn
        w = set(n.split())
        worst = max(len(w & t) / len(w | t) for t in tw)  # near-duplicates: word-set Jaccard
        assert worst < 0.5, r["prompt"]


# ---------------------------------------------------------------------------------------------
# Real models


@pytest.mark.slow
def test_a_training_workdir_is_a_contestant(tiny_qwen3, tmp_path):
    """The evals side of a workdir spec: kind "workdir", its own fingerprint, a merged model. That the merged
    weights are base + A B alpha/r is tests/test_workdir.py's (rubric_jax.rl.workdir)."""
    from evals.models import LoadedMember, classify, parse_models
    from rubric_jax.models.lora import lora_modules
    from rubric_jax.rl import trainer

    spec = importlib.util.spec_from_file_location("cfg_rcrl_evals", os.path.join(ROOT, "configs", "rcrl.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config("tiny")
    c.model = tiny_qwen3[0]
    c.steps = 1
    c.max_completion_len = 8
    c.prompt_width = "max"  # the sampler and update programs of the suite's other tiny runs (test_trainer)
    c.tensorboard = False
    wd = str(tmp_path / "run")
    trainer.train(c, wd)

    (con,) = parse_models(f"trained={wd}")
    assert con.members[0].kind == "workdir"
    cache = str(tmp_path / "cache")
    trained = LoadedMember(con.members[0], cache)
    base = LoadedMember(classify(tiny_qwen3[0]), cache)
    assert trained.fingerprint != base.fingerprint
    assert LoadedMember(con.members[0], cache).fingerprint == trained.fingerprint  # weights, not chance
    assert not lora_modules(trained.model)  # merged
    assert trained.tokenizer.eos_ids


@pytest.mark.slow
def test_peft_adapter_spec_matches_the_lora_model(tiny_qwen3, tmp_path):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from evals.models import LoadedMember, parse_models
    from rubric_jax import load_model
    from rubric_jax.models.export import export_peft
    from rubric_jax.models.lora import LoRAConfig, apply_lora, lora_modules

    m = apply_lora(load_model(tiny_qwen3[0]), LoRAConfig(rank=4, alpha=8.0, targets=("q_proj", "up_proj")))
    for i, (_, mod) in enumerate(lora_modules(m)):
        mod.lora_b.set_value(0.05 * jax.random.normal(jax.random.key(i), mod.lora_b.get_value().shape))
    ad = str(tmp_path / "adapter")
    export_peft(m, ad, base_model_name_or_path=tiny_qwen3[0])
    (con,) = parse_models(f"a={ad}")
    member = LoadedMember(con.members[0], str(tmp_path / "cache"))
    tokens = jnp.asarray([[1, 5, 9, 200, 3000, 7]], jnp.int32)
    want, _ = m(tokens)
    got, _ = member.model(tokens)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-4)
    assert member.fingerprint != LoadedMember(parse_models(f"b={tiny_qwen3[0]}")[0].members[0]).fingerprint


def _pairwise_elo_cli(tmp_path, monkeypatch, model, prompts):
    """`python -m evals.run --suite=pairwise_elo` with `model` and its word-shuffled copy as contestants and
    `model` as judge; checks what holds for any judge (files, plots, both orders of every pair, the ratings
    table, a rerun that recomputes nothing) and returns the ratings by name."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evals.run", "--suite=pairwise_elo", f"--models=base={model},shuffled=shuffled:{model}",
           f"--judge={model}", f"--prompts={prompts}", "--max_new_tokens=24", f"--out={out}",
           f"--cache_dir={tmp_path / 'cache'}", "--bootstrap=200", "--quiet"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in ("results.json", "report.md", "ratings.png", "win_rates.png", "answers.jsonl", "comparisons.npz"):
        assert (out / f).exists(), f
    import matplotlib.image

    for f in ("ratings.png", "win_rates.png"):
        img = matplotlib.image.imread(str(out / f))
        assert img.ndim == 3 and img.shape[0] > 50 and img.shape[1] > 50
    res = json.loads((out / "results.json").read_text())
    comps = np.load(out / "comparisons.npz")
    assert len(comps["a"]) == prompts * 2  # prompts x one pair x both orders
    assert set(zip(comps["a"].tolist(), comps["b"].tolist())) == {(0, 1), (1, 0)}
    assert "base" in r.stdout and "shuffled" in r.stdout  # the ratings table
    # a rerun recomputes nothing: no model is loaded, nothing generated or judged (in-process, so that a
    # load, a sample or a judgment fails the rerun; the command line itself was run above)
    import evals.generate
    import evals.judges
    import evals.models
    from evals.run import main

    def recomputed(*a, **k):
        raise AssertionError("the rerun recomputed something")

    monkeypatch.setattr(evals.models.LoadedMember, "_load", recomputed)
    monkeypatch.setattr(evals.generate, "sample", recomputed)
    monkeypatch.setattr(evals.judges.LocalJudge, "_judge", recomputed)
    assert main(cmd[3:]) == 0
    assert json.loads((out / "results.json").read_text())["models"] == res["models"]
    return {m["name"]: m["elo"] for m in res["models"]}


@pytest.mark.slow
def test_pairwise_elo_command_line_on_a_tiny_model(tiny_qwen3, tmp_path, monkeypatch):
    """The command line end to end on a tiny random checkpoint (contestant, shuffled copy and judge): results,
    report, plots, comparisons in both orders, and a rerun served from the caches. Which model the judge
    rates higher is a claim about a real model: test_pairwise_elo_real_small_run (heavy tier) makes it."""
    elo = _pairwise_elo_cli(tmp_path, monkeypatch, tiny_qwen3[0], prompts=3)
    assert set(elo) == {"base", "shuffled"} and all(np.isfinite(list(elo.values())))


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.smollm2
def test_pairwise_elo_real_small_run(tmp_path, monkeypatch):
    """The command line on the embedded SmolLM2 (contestant and judge): its judge must rate the model above
    its own word-shuffled copy, a claim about the real model that a random checkpoint cannot make. Over 30 s:
    6 prompts are what that claim was measured on, and the subprocess loads and compiles the 135M model.
    Heavy: about 50 s on 2 cores; test_pairwise_elo_command_line_on_a_tiny_model runs the same command in CI."""
    elo = _pairwise_elo_cli(tmp_path, monkeypatch, "smollm2-135m-instruct", prompts=6)
    assert elo["base"] > elo["shuffled"], elo


def test_remote_judge_both_orders_and_cache(tmp_path):
    from evals.judges import OVERALL, RemoteJudge
    from rubric_jax.openai_client import Completion

    j = RemoteJudge("openai:judge-model@http://127.0.0.1:1/v1", str(tmp_path))
    seen = []

    class FakeClient:
        def chat_many(self, requests, desc=""):
            out = []
            for r in requests:
                seen.append(r)
                user = r["messages"][-1]["content"]
                a_first = "### Response A\ngood" in user
                assert r["top_logprobs"] and r["temperature"] == 0.0
                lp = {"A": -0.05, "B": -3.0} if a_first else {"A": -3.0, "B": -0.05}
                out.append(Completion(text="A" if a_first else "B", finish_reason="stop", top_logprobs=[lp],
                                      cached=False))
            return out

    j.client = FakeClient()
    p = j.p_first("task", ["good answer", "bad answer"], [(0, 1), (1, 0)], [OVERALL])
    assert len(seen) == 2  # both orders asked
    assert p[0, 0] > 0.9 and p[1, 0] < 0.1
    p2 = j.p_first("task", ["good answer", "bad answer"], [(0, 1), (1, 0)], [OVERALL])
    assert len(seen) == 2 and np.allclose(p, p2)  # served from the verdict cache


@pytest.mark.slow
def test_two_judges_one_in_process_one_remote(tmp_path, tmp_path_factory):
    """--judges with an in-process judge and a remote one (our server) on the same tiny checkpoint: every
    comparison is made by both, and the report carries their agreement."""
    from serve_fixture import shared_server

    base, log_path, _ = shared_server(tmp_path_factory)
    ckpt = os.path.join(os.path.dirname(log_path), "tiny_qwen3")
    out = tmp_path / "out"
    from evals.run import main

    # in-process: the command line itself is test_pairwise_elo_command_line_on_a_tiny_model's
    assert main(["--suite=pairwise_elo", f"--models=a={ckpt},s=shuffled:{ckpt}",
                 f"--judges={ckpt},openai:tiny_qwen3@{base}", "--prompts=3", "--max_new_tokens=12", f"--out={out}",
                 f"--cache_dir={tmp_path / 'cache'}", "--bootstrap=50", "--quiet"]) == 0
    comps = np.load(out / "comparisons.npz")
    assert len(comps["a"]) == 3 * 2 * 2  # prompts x both orders x judges
    assert sorted(np.unique(comps["judge"]).tolist()) == sorted([ckpt, f"openai:tiny_qwen3@{base}"])
    res = json.loads((out / "results.json").read_text())
    agreement = res["judge_agreement"]
    assert sorted(agreement["judges"]) == sorted([ckpt, f"openai:tiny_qwen3@{base}"])
    assert np.asarray(agreement["n"]).shape == (2, 2)
    assert res["eval"]["judges"] == [ckpt, f"openai:tiny_qwen3@{base}"]
    assert "Judge agreement" in (out / "report.md").read_text()

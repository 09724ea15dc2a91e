"""configs/learn_ifeval.py, the first learning result: its training prompts (disjoint from the IFEval evaluation
prompts, every instruction checked by a program), the paired bootstrap interval evals.ifeval reports for
trained minus base, and the :tiny variant training two steps with the verifier as the only reward."""

import json
import os
import re
import types

import numpy as np
import pytest

from evals import ifeval as E
from rubric_jax.data import load_jsonl
from rubric_jax.data import ifeval_train as T
from rubric_jax.judge import Judge
from rubric_jax.methods import rlmr as rlmr_phase
from rubric_jax.rl import trainer, preflight
from rubric_jax.rl.checkpoint import Checkpointer
from rubric_jax.rl.metrics import read_metrics
from rubric_jax.verifiers.constraints import check_program, parse_constraints, resolve_method
from rubric_jax.verifiers.ifeval import INSTRUCTION_IDS

from conftest import load_config  # noqa: E402
from test_evals_ifeval import _stated  # noqa: E402
from test_trainer import _tiny_run_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.path.join(ROOT, "rubric_jax", "data", "ifeval_train.jsonl")
EVAL = os.path.join(ROOT, "evals", "data", "ifeval_prompts.jsonl")


def _norm(text: str) -> str:
    """Lowercase words only: case, spacing and punctuation do not make two prompts different."""
    return " ".join(re.findall(r"\w+", text.lower()))


def _first_sentence(text: str) -> str:
    return _norm(re.split(r"(?<=[.?!])\s", text.strip(), maxsplit=1)[0])


# ---------------------------------------------------------------------------------------------
# The training prompts


def test_the_config_trains_on_the_stored_prompts_which_the_seeded_generator_remakes():
    c = load_config("learn_ifeval")
    assert os.path.samefile(c.data.path, TRAIN)
    with open(TRAIN, encoding="utf-8") as f:
        assert f.read() == T.dumps(T.build()), "rerun python -m rubric_jax.data.ifeval_train"
    assert T.dumps(T.build(seed=1)) != T.dumps(T.build())  # the seed decides: the equality above is not vacuous
    recs = load_jsonl(TRAIN)
    assert len(recs) == len(T.OPENERS) * T.PER_ID + len(T.QUESTIONS) == 169
    assert len({r.prompt for r in recs}) == len(recs)
    assert all(r.constraints and r.task == "ifeval_train" for r in recs)


def test_training_prompts_are_disjoint_from_the_ifeval_evaluation_prompts():
    """No training prompt is an evaluation prompt up to case, spacing and punctuation, and none starts with
    an evaluation prompt's first sentence (its task), so the run cannot learn a test answer."""
    train = [r.prompt for r in load_jsonl(TRAIN)]
    held_out = [ex.prompt for ex in E.load_input_data(EVAL)]
    assert len(held_out) == 132
    eval_keys = {_norm(p) for p in held_out}
    # the normaliser does merge variants of one prompt, so an overlap would be found
    assert _norm("  " + held_out[0].upper().replace(",", " ,") + "!") in eval_keys
    assert not eval_keys & {_norm(p) for p in train}
    assert not {_first_sentence(p) for p in held_out} & {_first_sentence(p) for p in train}


def test_every_training_instruction_parses_is_stated_and_is_checked_by_a_program():
    c = load_config("learn_ifeval")
    recs = load_jsonl(TRAIN)
    counts = dict.fromkeys(INSTRUCTION_IDS, 0)
    samples = ["", "Hello, world.", "hello world", '"QUOTED ANSWER"', "* one\n* two\n\nP.S. bye",
               '{"a": 1}', "<<Title>>\n\nFirst part.\n\n***\n\nSecond *part* [name]."]
    for r in recs:
        cons = parse_constraints(r.constraints, where=r.id)
        for con, raw in zip(cons, r.constraints):
            counts[con.kind] += 1
            assert resolve_method(con, c.rlmr.verifier) == "program", (r.id, con.kind)
            assert {check_program(con, s) for s in samples} <= {True, False}
            # the prompt says what is checked: every number, word, marker and relation of the instruction
            assert not _stated(r.prompt, con.kind, {k: v for k, v in raw.items() if k not in ("type", "text")}), \
                (r.id, con.kind)
            # the judge reads the prompt's own sentence for it, and the pairwise rubric the same sentence
            assert con.text == raw["text"] and raw["text"] in r.prompt, (r.id, con.kind)
        assert 1 <= len(cons) <= 2
        rubric = r.load_rubric()
        assert [(c.id, c.check) for c in rubric.criteria] == [(con.kind, con.text) for con in cons], r.id
        if len(cons) == 2:
            assert T.compatible(cons[0].kind, cons[1].kind), r.id
    # every id the generator uses opens PER_ID prompts; the language instruction is left out on purpose
    assert counts["language:response_language"] == 0
    assert all(counts[i] >= T.PER_ID for i in T.OPENERS), counts
    assert counts[T.CONSTRAINED] == len(T.QUESTIONS)
    # the trainer's own start-up check of the records: every constraint resolved without a model
    rt = rlmr_phase.build(c, None, recs)
    assert not rt.verifier.needs_llm([con for cs in rt.constraints.values() for con in cs])


# ---------------------------------------------------------------------------------------------
# The paired bootstrap


def _scores(follow: np.ndarray) -> dict:
    """prompt_scores of a (prompts, instructions) boolean table, strict and loose alike."""
    rows = [{"prompt": f"p{i}", "instruction_id_list": ["punctuation:no_comma"] * len(f),
             "follow_all_instructions": bool(all(f)), "follow_instruction_list": [bool(x) for x in f],
             "response": ""} for i, f in enumerate(follow)]
    return E.prompt_scores(rows, rows)


def _base_table(n=120):
    """Two instructions per prompt: both followed on the first quarter, one on the next half, none after."""
    f = np.zeros((n, 2), bool)
    f[: n // 4] = True
    f[n // 4: 3 * n // 4, 0] = True
    return f


def test_the_interval_brackets_a_known_difference_and_excludes_zero_when_it_is_large():
    base = _base_table()  # 120 of 240 instructions, 30 of 120 prompts
    trained = base.copy()
    trained[30:78, 1] = True  # 48 more instructions, each completing a prompt: +20 points on both levels
    cmp = E.paired_bootstrap(_scores(base), _scores(trained), resamples=4000, seed=0)
    for acc in ("inst_level_strict_acc", "prompt_level_strict_acc"):
        want = 48 / 240 if acc.startswith("inst") else 48 / 120
        c = cmp[acc]
        assert c["difference"] == pytest.approx(want)
        assert 0 < c["low"] < want < c["high"], (acc, c)
    # one more followed instruction is no evidence: the same machinery then keeps 0 inside
    small = base.copy()
    small[30, 1] = True
    c = E.paired_bootstrap(_scores(base), _scores(small), resamples=4000, seed=0)["inst_level_strict_acc"]
    assert c["difference"] == pytest.approx(1 / 240) and c["low"] <= 0 < c["high"]


def test_the_interval_includes_zero_for_identical_models_and_for_equal_ones_that_differ_by_prompt():
    base = _base_table()
    same = E.paired_bootstrap(_scores(base), _scores(base.copy()), resamples=2000, seed=0)
    assert all(c["difference"] == c["low"] == c["high"] == 0 for c in same.values())
    swapped = base.copy()  # 20 prompts gain an instruction and 20 others lose one: equal accuracy
    swapped[30:50, 1] = True
    swapped[90:110, 0] = True
    swapped[0:20, 0] = False
    swapped[50:70, 0] = False
    c = E.paired_bootstrap(_scores(base), _scores(swapped), resamples=4000, seed=0)["inst_level_strict_acc"]
    assert c["difference"] == pytest.approx(0.0) and c["low"] < 0 < c["high"]


def test_pairing_narrows_the_interval_of_correlated_models():
    """Both models find the same prompts hard: resampling prompts jointly cancels that, two independent
    resamplings do not (the unpaired interval is computed here by hand)."""
    rng = np.random.default_rng(1)
    hard = rng.random(150) < 0.5
    base = np.where(hard[:, None], rng.random((150, 2)) < 0.1, rng.random((150, 2)) < 0.8)
    trained = base | (rng.random((150, 2)) < 0.1)
    a, b = _scores(base), _scores(trained)
    paired = E.paired_bootstrap(a, b, resamples=4000, seed=0)["inst_level_strict_acc"]
    r = np.random.default_rng(0)
    ia, ib = r.integers(0, 150, (4000, 150)), r.integers(0, 150, (4000, 150))
    num, den = a["inst_level_strict_acc"], a["n_instructions"]
    unpaired = (b["inst_level_strict_acc"][ib].sum(1) / den[ib].sum(1)) - num[ia].sum(1) / den[ia].sum(1)
    lo, hi = np.quantile(unpaired, [0.025, 0.975])
    assert paired["high"] - paired["low"] < 0.6 * (hi - lo)


def test_the_intervals_cover_the_true_difference_about_95_percent_of_the_time():
    """200 evaluations of two models whose per-instruction success rates differ by 0.1 (0.5 vs 0.6) on 100
    two-instruction prompts: the interval holds 0.1 in 89-99% of them (95% nominal; 200 draws)."""
    rng = np.random.default_rng(7)
    hits = 0
    for k in range(200):
        u = rng.random((100, 2))
        base, trained = u < 0.5, u < 0.6  # paired: one draw decides both models
        c = E.paired_bootstrap(_scores(base), _scores(trained), resamples=1000, seed=k)["inst_level_strict_acc"]
        hits += c["low"] <= 0.1 <= c["high"]
    assert 0.89 <= hits / 200 <= 0.99, hits


def test_a_fixed_seed_gives_fixed_intervals_and_bad_pairs_are_refused():
    base, trained = _base_table(), _base_table()
    trained[30:40, 1] = True
    a, b = _scores(base), _scores(trained)
    assert E.paired_bootstrap(a, b, seed=3) == E.paired_bootstrap(a, b, seed=3)
    none = E.paired_bootstrap(a, b, resamples=0)["inst_level_strict_acc"]
    assert none["difference"] == pytest.approx(10 / 240) and np.isnan(none["low"]) and np.isnan(none["high"])
    with pytest.raises(E.IFEvalError, match="same prompts"):
        E.paired_bootstrap(a, _scores(trained[:-1]))
    other = dict(b, prompts=list(reversed(b["prompts"])))
    with pytest.raises(E.IFEvalError, match="same order"):
        E.paired_bootstrap(a, other)


def _result(follow: np.ndarray) -> dict:
    rows = [{"prompt": f"p{i}", "instruction_id_list": ["punctuation:no_comma", "startend:quotation"],
             "response": "r", "follow_all_instructions": bool(all(f)),
             "follow_instruction_list": [bool(x) for x in f]} for i, f in enumerate(follow)]
    return {"eval_results_strict": rows, "eval_results_loose": rows}


def test_the_comparison_from_result_files_and_in_the_report(tmp_path):
    base, trained = _base_table(), _base_table()
    trained[30:78, 1] = True
    for name, f in (("base", base), ("trained", trained)):
        E.write_eval_results(_result(f), str(tmp_path / name))
    from_files = E.comparisons({"base": E.scores_from_results(str(tmp_path / "base")),
                                "trained": E.scores_from_results(str(tmp_path / "trained"))}, resamples=2000, seed=0)
    from_arrays = E.paired_bootstrap(_scores(base), _scores(trained), resamples=2000, seed=0)
    assert from_files == {"trained - base": from_arrays}
    models = {"base": {"n_prompts": 120, **{a: 0.5 for a in E.ACCURACIES}, "per_instruction": {},
                       "per_category": {}}}
    models["trained"] = dict(models["base"], inst_level_strict_acc=0.7)
    meta = {"bootstrap": {"resamples": 2000, "seed": 0, "confidence": 0.95}}
    E.write_report(models, str(tmp_path / "out"), title="t", meta=meta, comps=from_files)
    report = json.loads((tmp_path / "out" / "ifeval.json").read_text())
    assert report["comparisons"]["trained - base"]["inst_level_strict_acc"]["difference"] == pytest.approx(0.2)
    md = (tmp_path / "out" / "ifeval.md").read_text()
    c = from_arrays["inst_level_strict_acc"]
    assert f"| trained - base | +40.0 [{100 * from_arrays['prompt_level_strict_acc']['low']:+.1f}" in md
    assert f"+20.0 [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}]" in md and "2000 resamples" in md


def test_the_command_prints_and_writes_trained_minus_base(tmp_path, capsys, monkeypatch):
    """`--models=base=...,trained=...` end to end with the two models' answers given (no weights loaded):
    the second model drops the commas the first wrote on 3 of 4 prompts."""
    import evals.generate
    import evals.models

    prompts = [f"Describe item {i} without any commas." for i in range(4)]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"key": i, "prompt": p, "instruction_id_list": ["punctuation:no_comma"],
                                       "kwargs": [{}]}) + "\n" for i, p in enumerate(prompts)))
    answers = {"b": ["a, b"] * 4, "t": ["a b", "a b", "a b", "a, b"]}
    member = lambda label: types.SimpleNamespace(spec=types.SimpleNamespace(label=label, kind="hf"), fingerprint=label)
    monkeypatch.setattr(evals.models, "load_contestants",
                        lambda cs, cache, announce: {c.name: [member(c.members[0].path)] for c in cs})
    monkeypatch.setattr(evals.models, "classify", lambda spec, base=None: evals.models.MemberSpec("hf", spec))
    monkeypatch.setattr(evals.generate, "generate_answers", lambda m, ps, **kw: answers[m.spec.label])
    out = tmp_path / "out"
    rc = E.main(["--models=base=b,trained=t", f"--input_data={inp}", f"--out={out}", "--quiet", "--bootstrap=500"])
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "| trained - base | +75.0 [" in printed
    report = json.loads((out / "ifeval.json").read_text())
    c = report["comparisons"]["trained - base"]["inst_level_strict_acc"]
    assert c["difference"] == pytest.approx(0.75) and c["low"] <= 0.75 <= c["high"]
    assert report["eval"]["bootstrap"] == {"resamples": 500, "seed": 0, "confidence": 0.95}
    assert report["models"]["trained"]["per_instruction"]["punctuation:no_comma"]["strict"] == pytest.approx(0.75)


# ---------------------------------------------------------------------------------------------
# The config


def test_without_a_writing_reward_the_reward_is_the_share_of_kept_instructions_and_no_judge_runs():
    """rlmr.writing="none" with the linear mix a = 0, b = 1: r = 1 when a rollout keeps every instruction, else 0,
    from the programs alone; the judge's writing function is never called and leaves no rows."""
    def writing(*a):
        raise AssertionError("the judge ran")

    cfg = rlmr_phase.RlmrConfig(writing="none", mix="linear", linear_a=0.0, linear_b=1.0)
    recs = [types.SimpleNamespace(id="a", constraints=[{"type": "punctuation:no_comma"}]),
            types.SimpleNamespace(id="b", constraints=[{"type": "punctuation:no_comma"},
                                                       {"type": "change_case:english_lowercase"}])]
    rt = rlmr_phase.RlmrRuntime(cfg, rlmr_phase.ConstraintVerifier(None, "auto"),
                                {r.id: parse_constraints(r.constraints) for r in recs})
    responses = [["no comma here", "a, b", "fine"], ["all lower case", "Not lower", "x, y"]]
    r, rows, drop = rlmr_phase.rewards(rt, writing, recs, ["p", "q"], responses, 0.0, None, [0, 1])
    np.testing.assert_array_equal(r, [[1, 0, 1], [1, 0, 0]])
    assert "judge" not in rows and not drop.any() and not rows["rlmr"]["writing"].any()


def test_the_config_validates_and_its_reward_is_the_verifier_alone():
    full, tiny = load_config("learn_ifeval"), load_config("learn_ifeval", "tiny")
    for c in (full, tiny):
        preflight.check(c)
        assert c.reward.method == "rlmr" and c.rlmr.writing == "none"
        assert (c.rlmr.mix, c.rlmr.linear_a, c.rlmr.linear_b) == ("linear", 0.0, 1.0)
        assert c.model == "smollm2-135m-instruct" and c.dtype == "float32"
    assert tiny.steps == 2 < full.steps
    # completions long enough for the longest word count a training prompt asks for (SmolLM2: ~1.3 tokens a word)
    most = max(con.get("num_words", 0) for r in load_jsonl(TRAIN) for con in r.constraints)
    assert full.max_completion_len >= 1.3 * most


def test_the_start_up_line_says_no_judge_runs_when_the_verifier_is_the_reward():
    from rubric_jax.rl import plugins
    from rubric_jax.rl.setup import judge_line

    c = load_config("learn_ifeval")
    method = plugins.get(plugins.method_name(c))
    line = judge_line(types.SimpleNamespace(config=c, judge_apart=False, method=method))
    assert line.startswith("judge: none;") and "rlmr.writing='none'" in line
    # a verifier that may ask the model (auto: constraints without a program) still names the model it asks
    c.rlmr.verifier = "auto"
    line = judge_line(types.SimpleNamespace(config=c, judge_apart=False, method=method))
    assert line.startswith("judge (constraints without a program only") and "smollm2-135m-instruct" in line


@pytest.mark.slow
def test_tiny_variant_trains_two_steps_without_ever_calling_the_judge(tiny_qwen3, tmp_path, monkeypatch):
    """learn_ifeval:tiny on the tiny random Qwen3, as the other configs' step tests run (10-20 s on 2 shared
    cores, most of it compiling, and ~5 s to write the checkpoint when no other test has): two steps, every
    reward a verifier verdict, the judge never called."""
    def no_judge(*a, **k):
        raise AssertionError("the judge ran in a verifier-only run")

    monkeypatch.setattr(rlmr_phase.RlmrMethod, "writing_reward", no_judge)
    for name in ("pairwise_batch", "pointwise_batch"):
        monkeypatch.setattr(Judge, name, no_judge)
    cfg = _tiny_run_config("learn_ifeval", tiny_qwen3[0], steps=2)
    hist = trainer.train(cfg, str(tmp_path))
    assert [m["step"] for m in hist] == [0, 1]
    for m in hist:
        assert m["rlmr/writing_mean"] == 0.0 and any(k.startswith("verifier_pass/") for k in m)
        # a random model's groups are mostly flat (all break or all keep): dynamic sampling then skips the update
        assert np.isfinite(m["loss"]) if "loss" in m else (m["dynamic/empty_update"] == 1.0
                                                            and m["dynamic/kept_frac"] == 0.0)
    assert read_metrics(str(tmp_path))[-1]["step"] == 1
    assert Checkpointer(str(tmp_path)).latest_step() == 2


def test_the_held_out_split_keeps_whole_stems_apart_and_is_read_by_the_evaluation(tmp_path):
    """`python -m rubric_jax.data.ifeval_train --split_dir=DIR`: settings are chosen on training prompts only,
    on stems (and yes/no questions) that the training part never sees; the held-out file is IFEval's input
    format with the training records' own ids and kwargs, so the evaluation checks what the reward checked."""
    T.main(["--split_dir", str(tmp_path), "--heldout", "0.25"])
    train = load_jsonl(str(tmp_path / "train.jsonl"))
    held = E.load_input_data(str(tmp_path / "heldout_input_data.jsonl"))
    records = {r["prompt"]: r for r in (json.loads(x) for x in open(T.OUT, encoding="utf-8"))}
    assert len(train) + len(held) == len(records) and 30 <= len(held) <= 50
    group = lambda r: ("q", r["meta"]["question"]) if "question" in r["meta"] else ("s", r["meta"]["stem"])
    seen = {group(records[r.prompt]) for r in train}
    out = {group(records[x.prompt]) for x in held}
    assert not seen & out and {k for k, _ in out} == {"s", "q"}
    assert len([g for g in out if g[0] == "s"]) == round(0.25 * 42)
    for x in held:
        rec = records[x.prompt]
        assert list(x.instruction_id_list) == [c["type"] for c in rec["constraints"]]
        assert [dict(k) for k in x.kwargs] == [{k: v for k, v in c.items() if k not in ("type", "text")}
                                               for c in rec["constraints"]]
    # the same split for the same seed; another seed holds out other stems
    again, other = tmp_path / "again", tmp_path / "other"
    T.main(["--split_dir", str(again)])
    T.main(["--split_dir", str(other), "--seed", "1"])
    assert (again / "train.jsonl").read_text() == (tmp_path / "train.jsonl").read_text()
    assert (other / "train.jsonl").read_text() != (tmp_path / "train.jsonl").read_text()

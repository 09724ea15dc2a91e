"""evals.judge_pairs / judge_variants / judge_fidelity: the degradations on hand-made text, the bundled pair set,
the figures on hand-made verdicts, the study's reading of engine results (scripted judge), and (slow) an
end-to-end run with a tiny random judge."""

from __future__ import annotations

import collections
import json
import math

import numpy as np
import pytest

from evals import judge_fidelity as jf
from evals import judge_pairs as jp
from evals import judge_variants as jv
from rubric_jax.judge.common import PairwiseResult
from rubric_jax.rubrics import load_rubric
from rubric_jax.verifiers.constraints import check_program, parse_constraint
from rubric_jax.verifiers.text_units import count_words

TEXT = ("The ferry left at dawn. Mara counted the gulls behind it. Her brother had promised to wave from the pier. "
        "He did not come. She kept the ticket anyway.")
SENTS = ["The ferry left at dawn.", "Mara counted the gulls behind it.",
         "Her brother had promised to wave from the pier.", "He did not come.", "She kept the ticket anyway."]


# ---- degradations ----------------------------------------------------------------------------


def test_sentences_split_the_hand_made_text():
    assert jp.sentences(TEXT) == SENTS


def test_shuffle_keeps_the_sentence_multiset_and_moves_both_ends():
    for seed in range(20):
        out = jp.shuffle_sentences(TEXT, seed)
        got = jp.sentences(out)
        assert sorted(got) == sorted(SENTS)
        assert got[0] != SENTS[0] and got[-1] != SENTS[-1]
    assert jp.shuffle_sentences(TEXT, 3) == jp.shuffle_sentences(TEXT, 3)
    assert len({jp.shuffle_sentences(TEXT, s) for s in range(10)}) > 1  # the seed matters
    assert jp.sentences(jp.shuffle_sentences("One. Two.", 0)) == ["Two.", "One."]
    with pytest.raises(ValueError):
        jp.shuffle_sentences("Only one sentence here.", 0)


def test_truncate_keeps_the_first_35_percent_of_words():
    words = " ".join(f"w{i}" for i in range(20))
    assert jp.truncate(words) == " ".join(f"w{i}" for i in range(7))  # round(0.35 * 20) = 7
    out = jp.truncate(TEXT)
    n = len(TEXT.split())
    assert len(out.split()) == round(0.35 * n) and TEXT.startswith(out)
    assert jp.truncate("single", 0.35) == "single"  # never empty
    assert len(jp.truncate(words, 0.5).split()) == 10
    with pytest.raises(ValueError):
        jp.truncate(words, 1.0)


def test_repeat_block_inserts_copies_of_consecutive_sentences_in_place():
    for seed in range(10):
        out = jp.sentences(jp.repeat_block(TEXT, seed, span=2, copies=2))
        assert len(out) == len(SENTS) + 4
        extra = collections.Counter(out) - collections.Counter(SENTS)
        assert sum(extra.values()) == 4 and all(v == 2 for v in extra.values())
        start = out.index(next(iter(extra)))
        block = out[start:start + 2]
        assert block == SENTS[start:start + 2]
        assert out[start:start + 6] == block * 3
        assert out[:start] + out[start + 4:] == SENTS  # removing the copies gives the original back
    assert jp.repeat_block(TEXT, 5) == jp.repeat_block(TEXT, 5)
    assert len({jp.repeat_block(TEXT, s) for s in range(10)}) > 1


def test_off_topic_index_is_another_answer_and_seeded():
    picks = [jp.off_topic_index(5, 2, s) for s in range(30)]
    assert all(0 <= p < 5 and p != 2 for p in picks)
    assert len(set(picks)) == 4
    assert jp.off_topic_index(5, 2, (0, 1)) == jp.off_topic_index(5, 2, (0, 1))
    with pytest.raises(ValueError):
        jp.off_topic_index(1, 0, 0)


def test_constraint_edits():
    assert jp.replace_phrases(TEXT, {"ferry": "boat"}).startswith("The boat left")
    with pytest.raises(ValueError):
        jp.replace_phrases(TEXT, {"submarine": "boat"})
    short = jp.drop_middle(TEXT, 0.6)
    kept = jp.sentences(short)
    assert kept[0] == SENTS[0] and kept[-1] == SENTS[-1]
    assert count_words(short) <= 0.6 * count_words(TEXT) < count_words(" ".join(kept + [SENTS[1]]))
    assert jp.break_constraint(TEXT, {"drop_middle": 0.6}) == short
    with pytest.raises(ValueError):
        jp.break_constraint(TEXT, {"shout": True})


# ---- the bundled pair set --------------------------------------------------------------------


@pytest.fixture(scope="module")
def answers():
    return jp.load_answers()


def test_bundled_answers_are_short_and_pairs_are_complete(answers):
    assert len(answers) == 24
    for a in answers:
        assert 60 <= count_words(a.answer) <= 150, a.id
        if a.close:
            assert 60 <= count_words(a.close) <= 150, a.id
    pairs = jp.build_pairs(answers)
    counts = collections.Counter(p.kind for p in pairs)
    assert counts == {"shuffled": 24, "truncated": 24, "repeated": 24, "off_topic": 24, "constraint_violating": 10,
                      "close": 12}
    rubric = load_rubric("creative_writing")
    for p in pairs:
        assert p.better != p.worse and p.criteria[-1] == "overall"
        assert [c.id for c in jp.criteria_for(p, rubric)] == list(p.criteria)
        assert p.group == ("tuning" if p.kind in jp.TUNING_KINDS else "held_out")
    by_id = {a.id: a for a in answers}
    prompts = {a.answer: a.prompt for a in answers}
    for p in pairs:
        a = by_id[p.source]
        if p.kind == "off_topic":
            assert prompts[p.worse] != p.prompt
        if p.kind == "constraint_violating":
            cons = [parse_constraint(c) for c in a.constraints]
            assert all(check_program(c, p.better) for c in cons)
            assert not all(check_program(c, p.worse) for c in cons)
        if p.kind == "close":
            assert p.criteria[:-1] == a.close_criteria


def test_build_pairs_is_deterministic_in_its_seed(answers):
    a, b = jp.build_pairs(answers, seed=0), jp.build_pairs(answers, seed=0)
    assert a == b
    c = jp.build_pairs(answers, seed=1)
    shuffled = [(x.worse, y.worse) for x, y in zip(a, c) if x.kind == "shuffled"]
    assert any(u != v for u, v in shuffled)
    # a pair does not depend on which other kinds are built
    only = jp.build_pairs(answers, seed=0, kinds=("repeated",))
    assert only == [p for p in a if p.kind == "repeated"]
    with pytest.raises(ValueError):
        jp.build_pairs(answers, kinds=("mangled",))


# ---- figures ---------------------------------------------------------------------------------


def test_pairwise_figures_on_hand_made_verdicts():
    f = jf.pairwise_figures([0.9, 0.5, 0.3, 0.6], [0.8, 0.7, 0.4, math.nan], [0.2, 0.7, 0.8, 0.3])
    assert f["n"] == 4
    assert f["accuracy"] == pytest.approx(0.5)  # 0.9 and 0.6; the tie 0.5 counts wrong
    assert f["ties"] == pytest.approx(0.25)
    assert f["margin"] == pytest.approx((0.8 + 0.0 - 0.4 + 0.2) / 4)
    # readable readings 0.8 0.7 0.4 | 0.2 0.7 0.8 0.3: the first-shown wins in 4 of 7
    assert f["first_win"] == pytest.approx(4 / 7)
    assert f["mean_p_first"] == pytest.approx((0.8 + 0.7 + 0.4 + 0.2 + 0.7 + 0.8 + 0.3) / 7)
    # both orders readable for the first three: same pick, position pick (A then A), same pick
    assert f["order_agree"] == pytest.approx(2 / 3)
    assert f["invalid"] == pytest.approx(1 / 8)
    assert jf.pairwise_figures([0.5], [0.5], [0.5])["first_win"] == 0.5
    with pytest.raises(ValueError):
        jf.pairwise_figures([0.6, 0.7], [0.5], [0.5, 0.5])


def test_pointwise_figures_on_hand_made_scores():
    f = jf.pointwise_figures([3, 2, 1, 4], [1, 2, 2, 0], 4, valid_worse=[True, True, True, False])
    assert f["accuracy"] == pytest.approx(0.25)  # only the first: a tie, a loss and an unreadable score are wrong
    assert f["ties"] == pytest.approx(0.25)
    assert f["margin"] == pytest.approx((0.5 + 0 - 0.25 + 0) / 4)
    assert f["invalid"] == pytest.approx(0.25)
    assert f["first_win"] is None


def test_aggregate_splits_by_group_kind_and_criterion():
    rows = [dict(kind=k, group=jp.group_of(k), criterion=c, p_better=p, pf_better_first=0.6, pf_worse_first=0.6)
            for k, c, p in [("shuffled", "overall", 0.7), ("shuffled", "plot_coherence", 0.4),
                            ("truncated", "overall", 0.6), ("off_topic", "overall", 0.2),
                            ("off_topic", "prompt_alignment", 0.55)]]
    g = jf.aggregate(rows, "pairwise")
    assert g["overall"]["accuracy"] == pytest.approx(3 / 5)
    assert g["by_group"]["tuning"]["accuracy"] == pytest.approx(2 / 3)
    assert g["by_group"]["held_out"]["accuracy"] == pytest.approx(1 / 2)
    assert g["by_kind"]["shuffled"]["accuracy"] == pytest.approx(0.5)
    assert g["by_criterion"]["overall"]["n"] == 3
    assert g["by_group_criterion"]["held_out/overall"]["accuracy"] == 0.0
    assert g["by_group_criterion"]["tuning/overall"]["accuracy"] == 1.0


# ---- the study's reading of engine results (scripted judge) ------------------------------------


class ScriptedJudge:
    """pairwise_batch returns fixed single-order readings: P(first wins) = a with the better answer first and b
    with the worse first, for every criterion; p is what the engine's symmetrize would give."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def pairwise_batch(self, prompts, responses, criteria, *, mode, pairing):
        out = []
        for crits in criteria:
            c = len(crits)
            pf = np.full((2, 2, c), np.nan, np.float32)
            pf[0, 1], pf[1, 0] = self.a, self.b
            p = np.full((2, 2, c), 0.5, np.float32)
            p[0, 1] = (self.a + 1 - self.b) / 2
            p[1, 0] = 1 - p[0, 1]
            valid = np.isfinite(pf)
            out.append(PairwiseResult(p=p, p_first=pf, valid=valid, mask=~np.eye(2, dtype=bool),
                                      win_rates=np.zeros((2, c)), metrics={}))
        return out


def test_judge_pairwise_reads_orders_inverts_and_averages(answers):
    pairs = jp.build_pairs(answers, kinds=("shuffled",))[:3]
    rubric = load_rubric("creative_writing")
    crits = [jp.criteria_for(p, rubric) for p in pairs]
    rows = jf.judge_pairwise([(ScriptedJudge(0.9, 0.3), False)], pairs, crits, "logit", batch=2)
    assert len(rows) == 9 and rows[0]["pair"] == pairs[0].id
    assert rows[0]["p_better"] == pytest.approx(0.8)
    assert (rows[0]["pf_better_first"], rows[0]["pf_worse_first"]) == pytest.approx((0.9, 0.3))
    # a "which is worse" judge saying the same names the loser: everything flips
    inv = jf.judge_pairwise([(ScriptedJudge(0.9, 0.3), True)], pairs, crits, "logit")
    assert inv[0]["p_better"] == pytest.approx(0.2) and inv[0]["pf_better_first"] == pytest.approx(0.1)
    both = jf.judge_pairwise([(ScriptedJudge(0.9, 0.3), False), (ScriptedJudge(0.6, 0.6), True)], pairs, crits,
                             "logit")
    assert both[0]["p_better"] == pytest.approx((0.8 + 0.5) / 2)
    assert both[0]["pf_worse_first"] == pytest.approx((0.3 + 0.4) / 2)
    unread = jf.judge_pairwise([(ScriptedJudge(math.nan, 0.2), False)], pairs[:1], crits[:1], "generate")
    assert math.isnan(unread[0]["pf_better_first"]) and unread[0]["pf_worse_first"] == pytest.approx(0.2)


# ---- variants and CLI --------------------------------------------------------------------------


def test_variant_registry_and_template_builder(qwen_tokenizer):
    """Any chat tokenizer will do (the builders are what is checked): the tiny checkpoint's Qwen3 one."""
    from rubric_jax.judge.prompts import PromptBuilder, PromptConfig

    assert "baseline" in jv.VARIANTS and len(jv.VARIANTS) >= 3
    assert not jv.get_variant("baseline").needs_hook and jv.get_variant("worse").needs_hook
    with pytest.raises(ValueError):
        jv.get_variant("nope")
    base = PromptBuilder(qwen_tokenizer, PromptConfig())
    crit = load_rubric("creative_writing").criteria[0]
    templated = [v for v in jv.VARIANTS.values() if v.template]
    assert {v.template for v in templated} == set(jv.TEMPLATES)
    for v in templated:
        t = jv.TEMPLATES[v.template]
        b = jv.TemplatePromptBuilder(qwen_tokenizer, PromptConfig(**dict(v.prompt)), t)
        assert b.fingerprint != base.fingerprint
        head = b.head("pair", [1, 2], [3, 4])
        text = qwen_tokenizer.decode(list(head) + list(b.body([5])) + list(b.suffix("pair", crit)))
        assert t.cue in text and crit.check in text
        assert text.rstrip().endswith(t.cue.rstrip())  # the verdict token comes right after the cue
        assert b.head("point", [1], [2]) == base.head("point", [1], [2])  # pointwise untouched
        assert not b.segments("pair", True)["tail"].endswith(t.cue)  # generate mode writes its own answer
    judges = jv.make_judges(None, qwen_tokenizer, "both_sentence", model_id="m")  # no weights needed to build
    assert [inv for _, inv in judges] == [False, False]  # the engine reads the worse question inverted itself
    assert judges[0][0].config.prompt.pairwise_cue == "The better response is Response"
    assert [j.config.questions for j, _ in judges] == ["better", "worse"]
    assert jv.make_judges(None, qwen_tokenizer, "better_worse", model_id="m")[0][0].config.questions == "both"


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    assert jf.main(["--out", str(tmp_path), "--modes", "logit,psychic"]) == 2
    assert jf.main(["--out", str(tmp_path), "--kinds", "mangled"]) == 2
    assert jf.main(["--out", str(tmp_path), "--limit", "-1"]) == 2
    assert "error" in capsys.readouterr().err
    assert jf.parse_kinds("held_out") == list(jp.HELD_OUT_KINDS)


@pytest.mark.slow
def test_end_to_end_on_a_tiny_checkpoint(tmp_path, capsys, tiny_qwen3):
    """The study end to end with a tiny random judge: counts, figures' shapes, the both-orders average and the
    hard readings hold for any judge. Near 30 s on a loaded machine: it compiles the judge's programs for both
    prompt kinds in both modes, each of which is checked."""
    out = tmp_path / "study"
    rc = jf.main(["--out", str(out), "--model", tiny_qwen3[0], "--limit", "1",
                  "--kinds", "truncated,constraint_violating", "--modes", "logit,hard",
                  "--prompts", "pairwise,pointwise"])
    assert rc == 0
    res = json.loads((out / "judge_fidelity.json").read_text())
    md = (out / "judge_fidelity.md").read_text()
    assert res["counts"] == {"truncated": 1, "constraint_violating": 1}
    for pt in ("pairwise", "pointwise"):
        for mode in ("logit", "hard"):
            fig = res["results"][pt][mode]
            assert fig["overall"]["n"] == 3 + 2 and set(fig["by_group"]) == {"tuning", "held_out"}
            assert f"## {pt} / {mode}" in md
    for row in res["rows"]["pairwise"]["logit"]:
        # the engine's both-orders probability is the average of the two single-order readings
        assert row["p_better"] == pytest.approx((row["pf_better_first"] + 1 - row["pf_worse_first"]) / 2, abs=1e-5)
    assert {r["p_better"] for r in res["rows"]["pairwise"]["hard"]} <= {0.0, 0.5, 1.0}
    assert "pairs" in capsys.readouterr().err  # progress lines

"""evals.verifier_study: the figures, the programmatic item set, the study end to end with a scripted verifier,
and (slow) a smoke run with a tiny random verifier."""

from __future__ import annotations

import collections
import json
import math

import numpy as np
import pytest

from evals import verifier_study as vs
from evals.fuzzy_items import load_fuzzy_items
from rubric_jax.judge.verify import VerifyResult
from rubric_jax.verifiers.constraints import check_program

FIGURES = ("accuracy", "precision", "recall", "mean_p_pass_on_pass", "mean_p_pass_on_fail")


def test_score_matches_hand_computation():
    p = [0.9, 0.2, 0.6, 0.4, 0.1, 0.45, 0.3, 0.8]
    t = [True, True, False, False, False, True, False, True]
    types = ["a"] * 4 + ["b"] * 4
    s = vs.score(p, t, types)
    # predicted violation (p < 0.5): F T F T | T T T F ; true violation: F F T T | T F T F
    # overall: TP = items 3, 4, 6 -> 3; FP = items 1, 5 -> 2; FN = item 2 -> 1; TN = items 0, 7 -> 2
    # accuracy 5/8 = 0.625, precision 3/(3+2) = 0.6, recall 3/(3+1) = 0.75
    o = s["overall"]
    assert (o["n"], o["n_fail"], o["n_flagged"]) == (8, 4, 5)
    assert o["accuracy"] == pytest.approx(0.625)
    assert o["precision"] == pytest.approx(0.6)
    assert o["recall"] == pytest.approx(0.75)
    # mean p_pass: pass items 0, 1, 5, 7 -> (0.9 + 0.2 + 0.45 + 0.8) / 4; fail items (0.6 + 0.4 + 0.1 + 0.3) / 4
    assert o["mean_p_pass_on_pass"] == pytest.approx(0.5875)
    assert o["mean_p_pass_on_fail"] == pytest.approx(0.35)
    # type a (items 0-3): TP 1 (item 3), FP 1 (item 1), FN 1 (item 2), TN 1 -> 0.5 / 0.5 / 0.5
    a = s["by_type"]["a"]
    assert (a["accuracy"], a["precision"], a["recall"]) == pytest.approx((0.5, 0.5, 0.5))
    assert (a["mean_p_pass_on_pass"], a["mean_p_pass_on_fail"]) == pytest.approx((0.55, 0.5))
    # type b (items 4-7): TP 2 (items 4, 6), FP 1 (item 5), FN 0, TN 1 -> 3/4, 2/3, 1
    b = s["by_type"]["b"]
    assert (b["accuracy"], b["precision"], b["recall"]) == pytest.approx((0.75, 2 / 3, 1.0))
    assert (b["mean_p_pass_on_pass"], b["mean_p_pass_on_fail"]) == pytest.approx((0.625, 0.2))
    assert list(s["by_type"]) == ["a", "b"]


def test_score_edge_cases():
    # p_pass exactly 1/2 passes (VerifyResult.passes); nothing flagged and nothing to miss -> 1.0 by convention
    s = vs.score(np.array([0.5, 1.0]), [True, True], ["c", "c"])["overall"]
    assert (s["accuracy"], s["precision"], s["recall"], s["n_flagged"]) == (1.0, 1.0, 1.0, 0)
    assert s["mean_p_pass_on_fail"] is None
    # booleans are verdicts; every violation flagged wrongly the other way round -> 0 / 0 / 0
    s = vs.score([True, False], [False, True], ["x", "x"])["overall"]
    assert (s["accuracy"], s["precision"], s["recall"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        vs.score([0.1, 0.2], [True], ["x", "x"])


@pytest.fixture(scope="module")
def fuzzy():
    return load_fuzzy_items()


def test_programmatic_items(fuzzy):
    items = vs.programmatic_items(fuzzy, seed=0)
    assert len(items) >= 120
    counts = collections.Counter((it.type, it.passes) for it in items)
    for kind in vs.KINDS:
        assert counts[(kind, True)] >= 5 and counts[(kind, False)] >= 5, (kind, counts)
        assert abs(counts[(kind, True)] - counts[(kind, False)]) <= 1
    assert set(it.type for it in items) == set(vs.KINDS)
    for it in items:
        assert it.constraint.kind == it.type
        assert check_program(it.constraint, it.response) == it.passes, it.id
        assert it.constraint.text.strip()
    assert len({it.id for it in items}) == len(items)
    # the construction is what the brief describes, not merely labelled after the fact
    no_commas = [it for it in items if it.type == "no_commas"]
    assert all(("," in it.response) != it.passes for it in no_commas)
    lines = [it for it in items if it.type == "line_count"]
    assert sum(it.constraint.arguments["min"] > 1 for it in lines) >= len(lines) // 2
    # deterministic in the seed, and the seed matters
    again = vs.programmatic_items(fuzzy, seed=0)
    assert [(i.id, i.constraint, i.response) for i in again] == [(i.id, i.constraint, i.response) for i in items]
    other = vs.programmatic_items(fuzzy, seed=1)
    assert [i.constraint for i in other] != [i.constraint for i in items]
    # any prefix (what --limit keeps) spans several kinds and both labels
    head = items[:6]
    assert len({i.type for i in head}) == 6 and {i.passes for i in head} == {True, False}


def _result(p_pass: float, p_orders, label_bias: float) -> VerifyResult:
    return VerifyResult(p_pass=np.array([[p_pass]], np.float32), p_orders=np.array([[p_orders]], np.float32),
                        valid=np.array([[True]]), metrics={"label_bias": label_bias})


def test_study_end_to_end_with_scripted_verifier(monkeypatch, fuzzy):
    subset = [it for it in fuzzy if it.type in ("tone", "tense")]  # 24 items, 6 pass + 6 fail each
    truth = {(it.response, it.constraint): it.passes for it in subset}
    prog = vs.programmatic_items(subset, seed=3)
    truth.update({(it.response, it.constraint.text): it.passes for it in prog})
    kind_of = {it.constraint: it.type for it in subset}
    calls = []

    def fake_verify(judge, prompts, responses, constraints, *, mode=None):
        calls.append((mode, len(prompts)))
        out = []
        for resp, texts in zip(responses, constraints):
            assert len(resp) == 1 and len(texts) == 1
            ok = truth[(resp[0], texts[0])]
            if mode == "hard":  # the two orders always disagree: 1/2, a pass, never a flag
                out.append(_result(0.5, [1.0, 0.0], -0.2))
            elif kind_of.get(texts[0]) == "tone":  # right every time
                p = 0.9 if ok else 0.1
                out.append(_result(p, [p, p], 0.1))
            elif kind_of.get(texts[0]) == "tense":  # says "pass" whatever it reads
                out.append(_result(0.8, [0.8, 0.8], 0.1))
            else:  # programmatic: wrong every time
                p = 0.2 if ok else 0.7
                out.append(_result(p, [p, p], 0.1))
        return out

    monkeypatch.setattr(vs, "verify_batch", fake_verify)
    res = vs.run_study(object(), subset, modes=("logit", "hard"), seed=3)
    # one batched call per part and mode, holding every item
    assert calls == [("logit", 24), ("hard", 24), ("logit", len(prog)), ("hard", len(prog))]
    f = res["fuzzy"]
    assert f["counts"] == {"items": 24, "pass": 12, "fail": 12}
    # fuzzy / logit: tone all right (6 TP, 6 TN); tense all "pass" (6 FN, 6 TN) -> acc 18/24, prec 6/6, rec 6/12
    o = f["logit"]["overall"]
    assert (o["accuracy"], o["precision"], o["recall"]) == pytest.approx((0.75, 1.0, 0.5))
    assert (o["mean_p_pass_on_pass"], o["mean_p_pass_on_fail"]) == pytest.approx(((6 * 0.9 + 6 * 0.8) / 12,
                                                                                (6 * 0.1 + 6 * 0.8) / 12))
    assert (o["label_bias"], o["order_agreement"]) == pytest.approx((0.1, 1.0))
    h = f["hard"]["overall"]
    assert (h["accuracy"], h["recall"], h["n_flagged"]) == (0.5, 0.0, 0)
    assert (h["label_bias"], h["order_agreement"]) == pytest.approx((-0.2, 0.0))
    p = res["programmatic"]["logit"]["overall"]
    assert (p["accuracy"], p["precision"], p["recall"]) == (0.0, 0.0, 0.0)
    # per-item rows carry each mode's p_pass in the order the items were sent
    row = next(r for r in f["items"] if r["type"] == "tone" and r["label"] == "fail")
    assert (row["p_pass_logit"], row["p_pass_hard"]) == pytest.approx((0.1, 0.5))

    table = vs.format_table(res, "fuzzy", ("logit", "hard"))
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table.splitlines()[2:]}
    assert list(rows) == ["tone", "tense", "**all**"]
    assert rows["tone"] == ["12", "1.00", "1.00", "1.00", "0.50", "1.00*", "0.00"]
    assert rows["tense"] == ["12", "0.50", "1.00*", "0.00", "0.50", "1.00*", "0.00"]
    assert rows["**all**"] == ["24", "0.75", "1.00", "0.50", "0.50", "1.00*", "0.00"]
    ptable = vs.format_table(res, "programmatic", ("logit",))
    prow = {line.split("|")[1].strip(): line.split("|")[3:6] for line in ptable.splitlines()[2:]}
    assert list(prow)[:-1] == list(vs.KINDS)
    assert all([c.strip() for c in cells] == ["0.00", "0.00", "0.00"] for cells in prow.values())


def _check_figures(data: dict, modes):
    for part in ("fuzzy", "programmatic"):
        for mode in modes:
            block = data[part][mode]
            for f in list(block["by_type"].values()) + [block["overall"]]:
                for key in FIGURES:
                    v = f[key]
                    assert v is None or 0.0 <= v <= 1.0, (part, mode, key, v)
                assert f["accuracy"] is not None
            o = block["overall"]
            assert 0.0 <= o["order_agreement"] <= 1.0 and 0.0 <= o["invalid_fraction"] <= 1.0
            assert -0.5 <= o["label_bias"] <= 0.5


def test_main_with_scripted_verifier(monkeypatch, tmp_path, capsys):
    def oracle(judge, prompts, responses, constraints, *, mode=None):
        return [_result(0.5, [0.5, 0.5], 0.0) for _ in prompts]

    monkeypatch.setattr(vs, "build_judge", lambda model: object())
    monkeypatch.setattr(vs, "verify_batch", oracle)
    assert vs.main(["--out", str(tmp_path), "--modes=logit"]) == 0
    data = json.loads((tmp_path / "verifier_study.json").read_text())
    assert data["counts"]["fuzzy"] == {"items": 144, "pass": 72, "fail": 72}
    assert data["counts"]["programmatic"]["items"] >= 120
    assert data["model"] == vs.DEFAULT_MODEL and data["modes"] == ["logit"] and "hard" not in data["fuzzy"]
    _check_figures(data, ["logit"])
    md = (tmp_path / "verifier_study.md").read_text()
    assert "| word_count |" in md and "| no_dialogue |" in md and md in capsys.readouterr().out
    assert vs.main(["--out", str(tmp_path), "--modes=soft"]) == 2


@pytest.mark.slow
def test_main_on_a_tiny_checkpoint(tmp_path, tiny_qwen3):
    """The study end to end with a tiny random verifier: counts, figure ranges and the table hold for any
    verifier."""
    assert vs.main(["--out", str(tmp_path), "--model", tiny_qwen3[0], "--limit=6", "--modes=logit"]) == 0
    data = json.loads((tmp_path / "verifier_study.json").read_text())
    assert data["counts"]["fuzzy"]["items"] == 6 and data["counts"]["programmatic"]["items"] == 6
    _check_figures(data, ["logit"])
    for part in ("fuzzy", "programmatic"):
        for row in data[part]["items"]:
            assert 0.0 <= row["p_pass_logit"] <= 1.0
            assert all(v is None or 0.0 <= v <= 1.0 for v in row["p_orders_logit"])
    assert data["seconds"] > 0 and math.isfinite(data["seconds"])
    assert "| **all** | 6 |" in (tmp_path / "verifier_study.md").read_text()

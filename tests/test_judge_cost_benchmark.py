"""benchmarks/judge_cost.py on tiny random models: the dry count (no device calls) reports exactly the tokens
the real calls run, and the JSON holds one row per kind with its sets. Slow tier: sampling and two judge kinds
compiled for a tiny model, run twice, took 41 s on this 2-core CPU beside an evaluation."""

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import judge_cost  # noqa: E402

from rubric_jax.judge import forward  # noqa: E402


@pytest.mark.slow
def test_the_dry_count_equals_the_real_calls_tokens(tiny_qwen3, tmp_path):
    ckpt = tiny_qwen3[0]
    argv = [f"--policy={ckpt}", f"--judge={ckpt}", "--sets=2", "--g=2", "--max_new=6", "--kinds=verify,pairwise"]
    real_fn = forward.tree_score_jit
    outs = {}
    for name, extra in (("dry", ["--dry"]), ("real", [])):
        assert judge_cost.main(argv + extra + [f"--out={tmp_path / name}.json"]) == 0
        outs[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert forward.tree_score_jit is real_fn  # the dry run puts the device call back
    for dry, real in zip(outs["dry"]["results"], outs["real"]["results"]):
        assert dry["kind"] == real["kind"] and len(real["sets"]) == 2
        assert [(s["real"], s["padded"]) for s in dry["sets"]] == [(s["real"], s["padded"]) for s in real["sets"]]
        assert 0 < real["real_tokens"] <= real["padded_tokens"]
    assert [r["kind"] for r in outs["real"]["results"]] == ["verify", "pairwise"]
    # pairwise with both questions judges every ordered pair twice: more tokens than verifying each answer
    verify, pairwise = outs["real"]["results"]
    assert pairwise["padded_tokens"] > verify["padded_tokens"]

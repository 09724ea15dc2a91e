"""evals.reward_sources: the recovery share and its interval against hand-computed figures, and the whole command
on fake runs and fake answers (training and generation are replaced; the table, the reuse of finished runs, the
files and the errors are the real code's)."""

import json
import os
import types

import numpy as np
import pytest

from evals import ifeval as E
from evals import reward_sources as RS
from rubric_jax.rl.metrics import MetricsWriter

INPUTS = E.load_input_data(E.DEFAULT_INPUT)[:12]


def _scores(followed):
    """prompt_scores of per-prompt followed-instruction counts over prompts with two instructions each."""
    rows = [{"prompt": f"p{i}", "instruction_id_list": ["punctuation:no_comma"] * 2, "response": "",
             "follow_all_instructions": k == 2, "follow_instruction_list": [j < k for j in range(2)]}
            for i, k in enumerate(followed)]
    return E.prompt_scores(rows, rows)


def test_recovery_is_the_ratio_of_gains_with_an_interval_from_shared_draws():
    base = _scores([0] * 20 + [1] * 20)
    program = _scores([2] * 20 + [1] * 20)  # +40 instructions
    judged = _scores([1] * 20 + [1] * 20)  # +20
    r = RS.recovery(base, program, judged, resamples=2000, seed=0)
    assert r["share"] == pytest.approx(0.5)
    # every prompt that moves moves both by the same proportion: every draw gives exactly 1/2
    assert r["low"] == pytest.approx(0.5) and r["high"] == pytest.approx(0.5) and r["undefined"] == 0
    noisy = _scores([2] * 10 + [0] * 10 + [1] * 20)  # +20 as well, but from half the prompts
    r = RS.recovery(base, program, noisy, resamples=2000, seed=0)
    assert r["share"] == pytest.approx(0.5) and r["low"] < 0.5 < r["high"]
    flat = RS.recovery(base, base, judged, resamples=100, seed=0)
    assert np.isnan(flat["share"]) and flat["undefined"] == 100
    with pytest.raises(RS.RewardSourcesError, match="same prompts"):
        RS.recovery(base, program, _scores([1] * 39))


# A fake world: each source's policy follows a fixed share of the instructions, and its run logged fixed figures.
FOLLOW = {"base": 0.0, "program": 0.5, "judged": 0.25, "pairwise": 0.0, "selfjudged": 0.0}
AGREE = {"judged": [0.8, 0.6], "pairwise": [0.7, 0.7], "selfjudged": [0.5, 0.5]}


def _fake_train(calls):
    def train(source, workdir, variant, overrides):
        calls.append(source)
        w = MetricsWriter(workdir, tensorboard=False)
        for step in range(2):
            m = {"reward/mean": 0.1 * step, "time/sample": 1.0 + step, "time/judge": 2.0 + step, "time/update": 3.0}
            if source in AGREE:
                m["judge/program_agreement"] = AGREE[source][step]
                m["judge/program_agreement/punctuation:no_comma"] = AGREE[source][step]
            w.write_scalars(step, m)
        w.close()
    return train


def _fake_evaluate(seen):
    """Writes what evals.ifeval writes: the first FOLLOW share of the prompts answered without a comma (kept),
    the rest with one."""
    def evaluate(specs, eval_dir, args):
        seen.append(dict(specs))
        for name in specs:
            answers = {ex.prompt: ("no commas here" if i < FOLLOW[name] * len(INPUTS) else "a, b")
                       for i, ex in enumerate(INPUTS)}
            E.write_eval_results(E.evaluate(INPUTS, answers), os.path.join(eval_dir, name))
    return evaluate


def test_the_command_trains_what_is_missing_evaluates_and_writes_the_table(tmp_path, capsys):
    calls, seen = [], []
    args = RS._parse([f"--out={tmp_path}", "--only=judged,program", "--bootstrap=500", "--set=model=/m"])
    table = RS.run(args, train=_fake_train(calls), evaluate=_fake_evaluate(seen))
    assert calls == ["program", "judged"]  # the table's order, whatever --only's
    assert seen == [{"base": "/m", "program": str(tmp_path / "runs" / "program"),
                     "judged": str(tmp_path / "runs" / "judged")}]
    src = table["sources"]
    # the no_comma instruction, and every other one, is scored by IFEval's programs on the fake answers
    base_acc, prog_acc = (E.evaluate(INPUTS, {ex.prompt: ("no commas here" if i < FOLLOW[n] * 12 else "a, b")
                                              for i, ex in enumerate(INPUTS)}) for n in ("base", "program"))
    want = prog_acc["inst_level_strict_acc"] - base_acc["inst_level_strict_acc"]
    assert src["program"]["gain"]["inst_level_strict_acc"]["difference"] == pytest.approx(want)
    assert src["judged"]["agreement"] == pytest.approx(0.7)
    assert src["judged"]["step_seconds"] == {"sample": 2.0, "judge": 3.0, "update": 3.0, "step": 0.0}
    assert src["judged"]["per_id"]["punctuation:no_comma"]["agreement"] == pytest.approx(0.7)
    # the judged policy's gain on the instruction ids its prompts hold is half the program's here
    share = src["judged"]["recovery"]["share"]
    gj = src["judged"]["gain"]["inst_level_strict_acc"]["difference"]
    assert share == pytest.approx(gj / want) and "recovery" not in src["program"]
    for f in ("reward_sources.json", "reward_sources.md", "reward_sources.png"):
        assert (tmp_path / f).stat().st_size > 0
    md = (tmp_path / "reward_sources.md").read_text()
    assert "| judged |" in md and "70.0%" in md and "punctuation:no_comma" in md
    assert json.loads((tmp_path / "reward_sources.json").read_text())["sources"].keys() == {"program", "judged"}
    # a second call reuses both runs and their scores; a third with other settings is refused
    RS.run(args, train=_fake_train(calls), evaluate=_fake_evaluate(seen))
    assert calls == ["program", "judged"] and len(seen) == 1
    # a later session (its checkpoints gone, only the small files kept) adds one source: only that one is
    # trained and scored, and the table holds all three
    later = RS._parse([f"--out={tmp_path}", "--only=pairwise", "--bootstrap=500", "--set=model=/m"])
    table = RS.run(later, train=_fake_train(calls), evaluate=_fake_evaluate(seen))
    assert calls[-1] == "pairwise" and seen[-1] == {"pairwise": str(tmp_path / "runs" / "pairwise")}
    assert list(table["sources"]) == ["program", "judged", "pairwise"]
    assert table["sources"]["judged"]["recovery"]["share"] == pytest.approx(share)
    other = RS._parse([f"--out={tmp_path}", "--only=program", "--set=model=/other"])
    with pytest.raises(RS.RewardSourcesError, match="was trained with"):
        RS.run(other, train=_fake_train(calls), evaluate=_fake_evaluate(seen))


def test_bad_arguments_are_one_error_line(tmp_path, capsys):
    assert RS.main([f"--out={tmp_path}", "--only=program,oracle"]) == 2
    assert "unknown source(s) ['oracle']" in capsys.readouterr().err
    assert RS.main([f"--out={tmp_path}", "--set=model"]) == 2
    assert "--set takes KEY=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_the_program_config_names_the_base_and_every_source_config_exists():
    assert RS.program_config().model == "smollm2-135m-instruct"
    for name in RS.SOURCES.values():
        assert os.path.exists(os.path.join(RS.ROOT, "configs", f"{name}.py"))

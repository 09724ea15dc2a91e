"""Every python block of the README and docs/*.md runs in a test, as written, and each call twice in one
process: a documented call that works once and then breaks (a package function replaced by its submodule on
the first lazy import did) is caught here.

The documented calls name the embedded judge, "smollm2-135m-instruct"; here that string is replaced by a tiny
random checkpoint's directory, a form the same calls document ("or an HF dir"), so the blocks cost a tiny
model's compiles. The embedded name itself is loaded by tests/test_smollm2.py and the README's commands.
"""

import os
import sys
import types

import numpy as np
import pytest

from doc_blocks import python_block, python_blocks

EMBEDDED = '"smollm2-135m-instruct"'
PROMPT = "Write two sentences about a lighthouse keeper."
RESPONSES = ["The keeper climbed the stairs at dusk. Her lamp cut through the fog.",
             "A lighthouse stands by the sea and a man lives in it."]

# Each python block (found by a line it contains) and the test that runs it.
RUN_BY = {
    "tok = rubric_jax.load_tokenizer(": "test_doc_examples.py::test_the_python_api_block",
    "p = judge.pairwise(model, tok": "test_doc_examples.py::test_the_self_judging_block",
    "j = make_judge(": "test_doc_examples.py::test_the_rewards_api_block",
    "local = Judge(model, tok)": "test_doc_examples.py::test_the_verdicts_block",
    "reward = rubric_reward(": "test_doc_examples.py::test_the_trl_block",
    "mesh = make_mesh(": "test_doc_examples.py::test_the_sharding_block",
    '@register("word_target")': "test_methods.py::test_the_worked_example_trains_a_step",
    "# configs/word_target.py": "test_methods.py::test_the_worked_example_trains_a_step",
    '@term("brevity")': "test_methods.py::test_the_worked_reward_term_adds_its_standardised_bonus",
    "# configs/rcrl_brevity.py": "test_methods.py::test_the_worked_reward_term_adds_its_standardised_bonus",
}


def test_every_python_block_is_run_by_a_test():
    """A block no test runs fails here, naming its file and line; so does a RUN_BY test that does not exist."""
    here = os.path.dirname(os.path.abspath(__file__))
    unclaimed = [f"{f}:{line}" for f, line, code in python_blocks() if sum(m in code for m in RUN_BY) != 1]
    assert unclaimed == []
    for marker, test in RUN_BY.items():
        python_block(marker)  # exactly one block has it
        module, name = test.split("::")
        assert f"def {name}(" in open(os.path.join(here, module), encoding="utf-8").read(), test


@pytest.mark.slow
def test_the_python_api_block(tiny_qwen3):
    """Load, forward, generate (docs/python_api.md), twice. About 10 s: the tiny model's sampler."""
    import jax.numpy as jnp

    block = python_block("tok = rubric_jax.load_tokenizer(").replace(EMBEDDED, repr(tiny_qwen3[0]))
    tokens = np.random.RandomState(0).randint(0, 1000, (2, 5)).astype(np.int32)
    texts = []
    for _ in range(2):
        ns = {"tokens_bt": jnp.asarray(tokens)}
        exec(block, ns)  # noqa: S102 - the documentation's own example
        assert ns["logits"].shape == (2, 5, tiny_qwen3[1].config.vocab_size) and ns["logits"].dtype == jnp.float32
        assert len(ns["texts"]) == 1 and isinstance(ns["texts"][0], str)
        texts.append(ns["texts"][0])
    assert texts[0] == texts[1]  # seed=0 both times


@pytest.mark.slow
def test_the_self_judging_block(tiny_qwen3):
    """judge.pairwise and judge.pointwise (docs/judge.md, "Self-judging"), twice: the second run once raised
    "'module' object is not callable"."""
    from rubric_jax import judge, rubrics

    block = python_block("p = judge.pairwise(model, tok")
    c = len(rubrics.load_rubric("creative_writing").criteria)
    from rubric_jax import load_model, load_tokenizer

    model, tok = load_model(tiny_qwen3[0]), load_tokenizer(tiny_qwen3[0])
    for _ in range(2):
        ns = {"model": model, "tok": tok, "prompt": PROMPT, "responses": RESPONSES}
        exec(block, ns)  # noqa: S102
        p, s = np.asarray(ns["p"]), np.asarray(ns["s"])
        assert p.shape == (2, 2, c) and s.shape == (2, c) and np.asarray(ns["valid"]).shape == (2, c)
        np.testing.assert_allclose(p + np.swapaxes(p, 0, 1), 1.0, atol=1e-6)
        assert callable(judge.pairwise) and callable(judge.pointwise)


@pytest.mark.slow
def test_the_verdicts_block(tiny_qwen3):
    """The one door (docs/judge.md, "One door to a verdict"), each kind twice: pairwise and listwise win rates
    average 1/2, pointwise scores are within each criterion's scale, the verifier's p_pass in [0, 1]."""
    from rubric_jax import load_model, load_tokenizer, rubrics

    block = python_block("local = Judge(model, tok)")
    rubric = rubrics.load_rubric("creative_writing")
    model, tok = load_model(tiny_qwen3[0]), load_tokenizer(tiny_qwen3[0])
    for _ in range(2):
        ns = {"model": model, "tok": tok, "prompt": PROMPT, "responses": RESPONSES, "rubric": rubric}
        exec(block, ns)  # noqa: S102
        (pw,), (lw,), (pt,), (vf,) = ns["pw"], ns["lw"], ns["pt"], ns["vf"]
        c = len(rubric.criteria)
        assert pw.p.shape == (2, 2, c) and pw.win_rates.shape == lw.win_rates.shape == (2, c)
        np.testing.assert_allclose(pw.win_rates.mean(0), 0.5, atol=1e-6)
        np.testing.assert_allclose(lw.win_rates.mean(0), 0.5, atol=1e-5)
        assert pt.scores.shape == (2, c) and (pt.scores <= np.asarray(rubric.max_points)).all()
        assert vf.p_pass.shape == (2, 1) and ((vf.p_pass >= 0) & (vf.p_pass <= 1)).all()


@pytest.mark.slow
def test_the_rewards_api_block(tiny_qwen3):
    """make_judge and score_groups, twice: pairwise rewards are win rates, 1/2 on average in a group."""
    block = python_block("j = make_judge(").replace(EMBEDDED, repr(tiny_qwen3[0]))
    for _ in range(2):
        ns = {"prompts": [PROMPT], "groups": [RESPONSES]}
        exec(block, ns)  # noqa: S102
        out = ns["out"]
        assert out.rewards.shape == (1, 2) and out.per_criterion.shape[:2] == (1, 2)
        np.testing.assert_allclose(out.rewards.mean(), 0.5, atol=1e-6)


class _GRPOConfig:  # TRL is not installed here (torch-side training is launch/trl_rubric_grpo.py's)
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _GRPOTrainer:
    def __init__(self, model, reward_funcs, train_dataset, args):
        self.reward_funcs, self.args = reward_funcs, args

    def rewards(self, prompts, completions):  # as TRL calls a reward function: keywords, one float each
        return self.reward_funcs(prompts=prompts, completions=completions)


@pytest.mark.slow
def test_the_trl_block(tiny_qwen3, monkeypatch):
    """rubric_reward handed to GRPOTrainer, twice, then called the way TRL calls it (TRL's two classes are
    stand-ins: TRL itself is not installed; tests/test_trl_adapter.py covers the adapter's calling convention)."""
    monkeypatch.setitem(sys.modules, "trl", types.SimpleNamespace(GRPOConfig=_GRPOConfig, GRPOTrainer=_GRPOTrainer))
    block = python_block("reward = rubric_reward(").replace(EMBEDDED, repr(tiny_qwen3[0]))
    completions = RESPONSES + ["Fog. The keeper waits.", "Night falls on the tower and its light."]
    for _ in range(2):
        ns = {"policy": "my-policy", "dataset": []}
        exec(block, ns)  # noqa: S102
        trainer = ns["trainer"]
        assert trainer.args.num_generations == 4
        r = trainer.rewards([PROMPT] * 4, completions)
        assert len(r) == 4 and all(isinstance(x, float) for x in r)
        np.testing.assert_allclose(np.mean(r), 0.5, atol=1e-6)


@pytest.mark.slow
def test_the_sharding_block(tiny_qwen3, tmp_path_factory):
    """make_mesh, load_model(path, mesh=...), use_mesh (docs/scaling.md, "Sharding"), twice, in the 8-device
    subprocess the suite's other mesh checks share (test_sharding.mesh_check): every weight on the
    (fsdp=2, tensor=4) mesh, some split across devices."""
    from test_sharding import mesh_check

    res = mesh_check(tmp_path_factory, "readme_mesh_check", tiny_qwen3[0])
    assert res["device_count"] == 8 and len(res["runs"]) == 2
    for run in res["runs"]:
        assert run["kinds"] == ["NamedSharding"] and run["mesh"] == [str({"fsdp": 2, "tensor": 4})]
        assert run["devices"] == 8 and 0 < run["sharded"] <= run["leaves"]

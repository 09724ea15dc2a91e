"""rubric_jax.integrations.trl: TRL's reward-function contract, grouping by num_generations, both processes."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rubric_jax.integrations.trl import group_blocks, message_text, rubric_reward
from rubric_jax.rewards_api import make_judge, score_groups
from rubric_jax.rubrics import Criterion

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRITS = [Criterion(id="clear", name="Clarity", check="The response is clear."),
         Criterion(id="vivid", name="Vividness", check="The response uses vivid details.")]
PROMPTS = ["Describe a harbour at dawn.", "Write one line about rain."]
GROUPS = [["Gulls circle the quiet boats.", "boats the quiet circle gulls", "The harbour is there."],
          ["Rain taps the tin roof.", "It rains.", "roof tin the taps rain"]]


def trl_batch(order=(0, 1)):
    """The flat batch TRL hands a reward function: each prompt repeated once per completion, in a row."""
    return ([PROMPTS[q] for q in order for _ in GROUPS[q]], [c for q in order for c in GROUPS[q]])


def test_group_blocks_and_message_text():
    p = ["a", "a", "b", "b", "a", "a"]
    assert group_blocks(p, 2) == [(0, 2), (2, 4), (4, 6)]
    assert group_blocks(p, None) == [(0, 2), (2, 4), (4, 6)]
    assert group_blocks(["a", "a", "a", "a"], 2) == [(0, 2), (2, 4)]  # the same prompt drawn twice
    assert group_blocks(["a", "a", "a", "a"], None) == [(0, 4)]
    with pytest.raises(ValueError, match="not a whole number"):
        group_blocks(p, 4)
    with pytest.raises(ValueError, match="completions 0..2 should share one prompt"):
        group_blocks(["a", "a", "b", "b", "b", "b"], 3)
    with pytest.raises(ValueError, match=">= 1"):
        group_blocks(p, 0)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    assert message_text(chat, "user") == "Hi?" and message_text("plain", "user") == "plain"
    assert message_text([{"role": "assistant", "content": "Yo."}], "assistant") == "Yo."
    assert message_text([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "user") == "Hi"
    with pytest.raises(TypeError, match="chat messages"):
        message_text(3)


@pytest.fixture(scope="module")
def judge(tiny_qwen3_model, qwen_tokenizer):
    return make_judge(tiny_qwen3_model, qwen_tokenizer, mode="logit")


@pytest.fixture(scope="module")
def reference(judge):
    return score_groups(PROMPTS, GROUPS, CRITS, judge=judge).rewards


def test_rewards_come_back_in_trls_order(judge, reference):
    f = rubric_reward(judge, CRITS, num_generations=3)
    prompts, completions = trl_batch()
    out = f(prompts=prompts, completions=completions, completion_ids=None, trainer_state=None)
    assert isinstance(out, list) and len(out) == 6 and all(isinstance(x, float) for x in out)
    np.testing.assert_allclose(out, reference.reshape(-1), atol=1e-5)
    # groups swapped in the batch: the rewards swap with them
    p2, c2 = trl_batch((1, 0))
    np.testing.assert_allclose(f(p2, c2), reference[::-1].reshape(-1), atol=1e-5)
    # chat-format prompts and completions, one group per judge call: the same rewards
    f.max_groups = 1
    chat_p = [[{"role": "system", "content": "Be kind."}, {"role": "user", "content": p}] for p in prompts]
    chat_c = [[{"role": "assistant", "content": c}] for c in completions]
    np.testing.assert_allclose(f(chat_p, chat_c), reference.reshape(-1), atol=1e-5)
    assert f.__name__ == "rubric_pairwise"
    with pytest.raises(ValueError, match="should share one prompt"):
        f(prompts[1:] + prompts[:1], completions)
    with pytest.raises(ValueError, match="6 prompts but 5 completions"):
        f(prompts, completions[:5])


def test_the_in_process_judge_it_builds_itself(tiny_qwen3_model, qwen_tokenizer, reference):
    f = rubric_reward(tiny_qwen3_model, CRITS, tokenizer=qwen_tokenizer, readout="logit", num_generations=3)
    np.testing.assert_allclose(f(*trl_batch()), reference.reshape(-1), atol=1e-5)
    assert f._scorer.judge.config.mode == "logit"
    with pytest.raises(ValueError, match="cannot change a ready Judge"):
        rubric_reward(f._scorer.judge, CRITS, readout="sign")(*trl_batch())


@pytest.mark.slow
def test_the_judge_in_a_subprocess_gives_the_same_rewards(tiny_qwen3, reference):
    f = rubric_reward(tiny_qwen3[0], CRITS, readout="logit", process="subprocess", platform="cpu")
    try:
        np.testing.assert_allclose(f(*trl_batch()), reference.reshape(-1), atol=1e-5)
        with pytest.raises(RuntimeError, match="judge process failed"):
            f._get_scorer().score(PROMPTS, GROUPS, CRITS, "ranked", f.weights, 0)  # the child's error, relayed
        np.testing.assert_allclose(f(*trl_batch((1, 0))), reference[::-1].reshape(-1), atol=1e-5)  # still alive
    finally:
        f.close()
    assert f._scorer is None


def test_bad_arguments_fail_at_once():
    with pytest.raises(ValueError, match="mode must be"):
        rubric_reward("x", CRITS, mode="ranked")
    with pytest.raises(ValueError, match="process must be"):
        rubric_reward("x", CRITS, process="thread")
    with pytest.raises(ValueError, match="weights"):
        rubric_reward("x", CRITS, weights=[1.0])


@pytest.mark.slow
@pytest.mark.smollm2
def test_a_two_step_trl_grpo_run(tmp_path):
    pytest.importorskip("trl")
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "trl_rubric_grpo.py"), f"--out={out}",
                        "--max_steps=2", "--num_generations=2", "--prompts=4", "--max_completion_length=8",
                        "--criteria=2", "--max_response_tokens=16"],
                       capture_output=True, text=True, timeout=1200, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-4000:]
    steps = [row for row in json.loads((out / "log_history.json").read_text()) if "rewards/rubric_pairwise/mean" in row]
    assert len(steps) == 2
    for row in steps:
        assert 0.0 <= row["rewards/rubric_pairwise/mean"] <= 1.0 and np.isfinite(row["loss"])

"""Sequence-classification reward models: parity with transformers, loading errors, score_texts."""

import logging
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import _randomize, copy_qwen_tokenizer, write_tiny_checkpoint
from rubric_jax.models.loading import CheckpointError
from rubric_jax.models.reward_model import (encode_exchange, last_real_index, length_bucket, load_reward_model,
                                            score_texts)

QWEN_PAD = 151643  # <|endoftext|>, the Qwen tokenizer's pad token


def write_tiny_reward_model(out_dir, arch, *, seed, vocab_size, pad_token_id, labels=("LABEL_0",)):
    """A random tiny *ForSequenceClassification checkpoint (+ the Qwen tokenizer files) via transformers."""
    import torch
    import transformers


    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                  rms_norm_eps=1e-6, pad_token_id=pad_token_id,
                  id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)})
    if arch == "qwen3":
        model = transformers.Qwen3ForSequenceClassification(transformers.Qwen3Config(rope_theta=10000.0, **common))
    else:
        rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16, "rope_theta": 500000.0}
        model = transformers.LlamaForSequenceClassification(
            transformers.LlamaConfig(rope_theta=500000.0, rope_scaling=rope, **common))
    _randomize(model, seed)
    with torch.no_grad():  # a head of O(1) scores, so the 1e-4 tolerance is a relative 1e-4 check
        model.score.weight.mul_(8.0)
    model.eval()
    model.save_pretrained(out_dir)
    copy_qwen_tokenizer(out_dir)
    return model


@pytest.fixture(scope="session")
def qwen_rm(tmp_path_factory):
    """(dir, transformers model, our RewardModel, tokenizer): a one-label Qwen3 RM with the real vocabulary."""
    d = str(tmp_path_factory.mktemp("rm_qwen3"))
    hf = write_tiny_reward_model(d, "qwen3", seed=11, vocab_size=151936, pad_token_id=QWEN_PAD)
    rm, tok = load_reward_model(d)
    return d, hf, rm, tok


@pytest.fixture(scope="session")
def llama_rm(tmp_path_factory):
    """A two-label Llama RM (llama3 rope scaling, positions past its original context)."""
    d = str(tmp_path_factory.mktemp("rm_llama"))
    hf = write_tiny_reward_model(d, "llama", seed=12, vocab_size=151936, pad_token_id=QWEN_PAD,
                                 labels=("helpful", "harmless"))
    rm, tok = load_reward_model(d)
    return d, hf, rm, tok


def hf_scores(hf, tokens, mask=None):
    import torch

    with torch.no_grad():
        am = None if mask is None else torch.as_tensor(np.asarray(mask, np.int64))
        return hf(input_ids=torch.as_tensor(np.asarray(tokens, np.int64)), attention_mask=am).logits.float().numpy()


def forward(rm, tokens, mask=None):
    """Our scores through the same jitted forward score_texts uses (eager calls are slow on CPU)."""
    from flax import nnx

    from rubric_jax.models.reward_model import _scores

    tokens = np.asarray(tokens)
    mask = np.ones(tokens.shape, bool) if mask is None else np.asarray(mask)
    graphdef, state = nnx.split(rm)
    return np.asarray(_scores(graphdef, state, jnp.asarray(tokens, jnp.int32), jnp.asarray(mask)))


def reference(rm, rows, t=64):
    """Scores of token rows in the given order, right padded to one (len(rows), t) batch."""
    tokens = np.zeros((len(rows), t), np.int32)
    mask = np.zeros((len(rows), t), bool)
    for i, r in enumerate(rows):
        tokens[i, :len(r)], mask[i, :len(r)] = r, True
    return forward(rm, tokens, mask)


def _rows(vocab, pad, lengths, seed):
    rng = np.random.RandomState(seed)
    rows = []
    for n in lengths:
        r = rng.randint(1, vocab, n)
        r[r == pad] = pad + 1 if pad + 1 < vocab else pad - 1  # no real token equals the pad id
        rows.append(r)
    return rows


def _padded(rows, pad, side):
    t = max(len(r) for r in rows)
    tokens = np.full((len(rows), t), pad, np.int64)
    mask = np.zeros((len(rows), t), bool)
    for i, r in enumerate(rows):
        sl = slice(0, len(r)) if side == "right" else slice(t - len(r), t)
        tokens[i, sl], mask[i, sl] = r, True
    return tokens, mask


@pytest.mark.slow  # compiles the reward model's forward
@pytest.mark.parametrize("which", ["qwen_rm", "llama_rm"])
def test_parity_with_transformers(which, request):
    _, hf, rm, _ = request.getfixturevalue(which)
    vocab, pad = hf.config.vocab_size, hf.config.pad_token_id
    rows = _rows(vocab, pad, [37, 21, 9], seed=3)

    # Right padding: transformers' own batch scores are the reference.
    tokens, mask = _padded(rows, pad, "right")
    ref = hf_scores(hf, tokens, mask)
    ours = forward(rm, tokens, mask)
    assert ours.shape == ref.shape == (3, rm.num_labels) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4)
    assert np.abs(ref).max() > 0.1 and np.ptp(ref[:, 0]) > 0.1  # scores are not all ~0 or all equal

    # Left padding: each row run alone, unpadded, is what a left-padded row must score.
    tokens, mask = _padded(rows, pad, "left")
    alone = np.concatenate([hf_scores(hf, r[None]) for r in rows])
    ours = forward(rm, tokens, mask)
    np.testing.assert_allclose(ours, alone, rtol=0, atol=1e-4)


def test_last_real_index_and_buckets():
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 1, 0, 1, 1], [0, 0, 0, 0, 0]], bool)
    assert np.asarray(last_real_index(jnp.asarray(mask))).tolist() == [2, 3, 4, 0]
    assert [length_bucket(n, 200) for n in (1, 32, 33, 100, 129, 200)] == [32, 32, 64, 128, 200, 200]


def test_labels_and_reward_column(qwen_rm, llama_rm):
    rm1, rm2 = qwen_rm[2], llama_rm[2]
    assert rm1.num_labels == 1 and rm1.reward_column() == 0 and rm1.pad_token_id == QWEN_PAD
    assert rm2.labels == ("helpful", "harmless")
    with pytest.raises(ValueError, match=r"2 labels \['helpful', 'harmless'\].*label="):
        rm2.reward_column()
    assert rm2.reward_column("harmless") == 1 and rm2.reward_column(0) == 0
    with pytest.raises(ValueError, match="out of range"):
        rm2.reward_column(2)


def test_causal_lm_checkpoint_is_rejected_by_name(tmp_path):
    write_tiny_checkpoint(str(tmp_path), "llama", tied=False, seed=5, vocab_size=512)
    with pytest.raises(CheckpointError, match=r"not a sequence-classification.*'score\.weight'.*LlamaForCausalLM"):
        load_reward_model(str(tmp_path))


@pytest.mark.slow  # compiles the reward model's forward
def test_missing_and_misshapen_tensors_are_named(qwen_rm, tmp_path):
    from safetensors.numpy import load_file, save_file

    src = qwen_rm[0]
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), tmp_path / f)
    tensors = load_file(str(tmp_path / "model.safetensors"))

    bad = {k: v for k, v in tensors.items() if k != "model.layers.1.self_attn.q_norm.weight"}
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.1\.self_attn\.q_norm\.weight'"):
        load_reward_model(str(tmp_path))

    save_file(dict(tensors, **{"score.weight": tensors["score.weight"][:, :10]}), str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"'score\.weight' has shape \(1, 10\), expected \(num_labels, 64\)"):
        load_reward_model(str(tmp_path))

    # Two head rows but a config that names one label.
    save_file(dict(tensors, **{"score.weight": np.concatenate([tensors["score.weight"]] * 2)}),
              str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"id2label names 1 labels but 'score\.weight' has 2 rows"):
        load_reward_model(str(tmp_path))


PROMPTS = ["Write a haiku about rain.", "Summarise the plot of Hamlet in two sentences, please.",
           "Hi there! Could you greet me back in a warm and friendly way?",
           "Name three prime numbers below ten, and say what makes each one prime.",
           "Describe the sea at night to someone who has never seen it."]
RESPONSES = ["Rain taps the window / a slow grey song on the glass / the street drinks it in",
             "A prince avenges his father. Nearly everyone dies.", "Hello! How can I help you today?",
             "2, 3 and 5.", "Dark and breathing, it is a field of moving ink lit by a thin road of moonlight."]


@pytest.mark.slow  # compiles the reward model's forward
def test_score_texts_order_and_batching(qwen_rm):
    _, _, rm, tok = qwen_rm
    by2 = score_texts(rm, tok, PROMPTS, RESPONSES, batch_size=2)
    by5 = score_texts(rm, tok, PROMPTS, RESPONSES, batch_size=5)
    assert by2.shape == (5,) and by2.dtype == np.float32
    np.testing.assert_allclose(by2, by5, rtol=0, atol=1e-5)
    # Each output is its own exchange's score, in the caller's order (score_texts sorts rows by
    # length internally, and these lengths are all different).
    rows = [encode_exchange(tok, p, r)[0] for p, r in zip(PROMPTS, RESPONSES)]
    assert len({len(r) for r in rows}) == len(rows) and all(32 < len(r) <= 64 for r in rows)  # one bucket
    ref = reference(rm, rows)[:, 0]
    np.testing.assert_allclose(by2, ref, rtol=0, atol=1e-4)
    assert np.diff(np.sort(ref)).min() > 1e-3  # distinct scores, so a permuted output would fail
    rev = score_texts(rm, tok, PROMPTS[::-1], RESPONSES[::-1], batch_size=2)
    np.testing.assert_allclose(rev, by2[::-1], rtol=0, atol=1e-5)


def test_exchange_is_chat_templated(qwen_rm):
    tok = qwen_rm[3]
    ids, cut = encode_exchange(tok, "What is 2+2?", "4")
    assert not cut
    assert ids == tok.encode(tok.chat([{"role": "user", "content": "What is 2+2?"},
                                       {"role": "assistant", "content": "4"}], add_generation_prompt=False))
    text = tok.decode(ids, skip_special_tokens=False)
    assert text.index("user\nWhat is 2+2?") < text.index("assistant\n") < text.rindex("4<|im_end|>")


def test_truncation_keeps_frame_and_response_start(qwen_rm, caplog):
    _, _, rm, tok = qwen_rm
    prompt = "Tell me a story."
    response = " ".join(f"word{i}" for i in range(200))
    full, cut = encode_exchange(tok, prompt, response, max_len=4096)
    assert not cut
    ids, cut = encode_exchange(tok, prompt, response, max_len=64)
    assert cut and len(ids) == 64
    tail = tok.encode("<|im_end|>\n")
    assert ids[-len(tail):] == tail == full[-len(tail):]  # the turn still closes where the score is read
    text = tok.decode(ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>user\nTell me a story.<|im_end|>")  # prompt whole
    assert "word0 word1" in text and "word199" not in text  # response cut at its end
    head = len(tok.encode(tok.chat(prompt, add_generation_prompt=True)))
    assert ids[:head] == full[:head]

    # A prompt too long for half the window loses its end; the response keeps half of max_len.
    long_prompt = "Instruction first. " + " ".join(f"ctx{i}" for i in range(300))
    ids, cut = encode_exchange(tok, long_prompt, response, max_len=128)
    text = tok.decode(ids, skip_special_tokens=False)
    assert cut and len(ids) == 128 and ids[-len(tail):] == tail
    assert "user\nInstruction first. ctx0" in text and "ctx299" not in text and "word0 word1" in text
    assert len(tok.encode(text[text.index("word0"):text.rindex("<|im_end|>")])) >= 64 - 2

    # score_texts scores exactly the truncated ids, and says it cut something.
    with caplog.at_level(logging.WARNING, logger="rubric_jax.models.reward_model"):
        got = score_texts(rm, tok, [prompt, prompt], [response, "short"], max_len=64, batch_size=2)
    assert "1 of 2 exchanges were over max_len=64" in caplog.text
    rows = [encode_exchange(tok, prompt, r, max_len=64)[0] for r in (response, "short")]
    np.testing.assert_allclose(got, reference(rm, rows)[:, 0], rtol=0, atol=1e-4)


def test_multi_label_needs_label(llama_rm):
    _, _, rm, tok = llama_rm
    with pytest.raises(ValueError, match="pass label="):
        score_texts(rm, tok, ["a"], ["b"])
    harmless = score_texts(rm, tok, PROMPTS[:2], RESPONSES[:2], label="harmless", batch_size=2)
    helpful = score_texts(rm, tok, PROMPTS[:2], RESPONSES[:2], label=0, batch_size=2)
    full = reference(rm, [encode_exchange(tok, p, r)[0] for p, r in zip(PROMPTS[:2], RESPONSES[:2])])
    np.testing.assert_allclose(np.stack([helpful, harmless], 1), full, rtol=0, atol=1e-4)
    assert np.abs(full[:, 0] - full[:, 1]).min() > 1e-3  # the columns differ, so a wrong pick would fail


@pytest.mark.slow  # compiles the reward model's forward
def test_load_on_a_one_device_mesh_matches(qwen_rm):
    from jax.sharding import NamedSharding

    from rubric_jax.models.sharding import make_mesh, use_mesh

    d, _, rm, tok = qwen_rm
    mesh = make_mesh({"data": 1, "fsdp": 1, "tensor": 1})
    rm_m, _ = load_reward_model(d, mesh=mesh)
    assert isinstance(rm_m.score.get_value().sharding, NamedSharding)
    assert isinstance(rm_m.backbone.embed_tokens.embedding.get_value().sharding, NamedSharding)
    with use_mesh(mesh):
        got = score_texts(rm_m, tok, PROMPTS[:2], RESPONSES[:2], batch_size=2)
    np.testing.assert_allclose(got, score_texts(rm, tok, PROMPTS[:2], RESPONSES[:2], batch_size=2), rtol=0, atol=1e-5)



def test_rlmr_writing_reward_from_a_reward_model(qwen_rm):
    """rlmr.writing='reward_model': each rollout's writing reward is the model's score of (prompt, response),
    then the group penalty applies to the violators (here: responses with a comma)."""
    import jax

    from rubric_jax.methods import rlmr as rlmr_phase
    from rubric_jax.verifiers.constraints import parse_constraints
    from rubric_jax.verifiers.verifier import ConstraintVerifier

    _, _, rm, tok = qwen_rm
    cfg = rlmr_phase.RlmrConfig(writing="reward_model", reward_model="unused: loaded above", gamma=0.1)
    rt = rlmr_phase.RlmrRuntime(cfg, ConstraintVerifier(None), {"a": parse_constraints([{"type": "no_commas"}])},
                                reward_model=(rm, tok))

    class Rec:
        id = "a"

    responses = [["one, two", "three four", "five six seven"]]
    r, rows, drop = rlmr_phase.rewards(rt, None, [Rec()], ["Count."], responses, 0.0, jax.random.key(0), [0])
    want = score_texts(rm, tok, ["Count."] * 3, responses[0])
    np.testing.assert_allclose(rows["rlmr"]["writing"][0], want, rtol=1e-6)
    v = np.array([True, False, False])
    np.testing.assert_allclose(r[0][~v], want[~v], rtol=1e-6)
    assert r[0][0] <= np.mean(r[0]) - 0.1 + 1e-5 and not drop[0] and "judge" not in rows

"""The embedded SmolLM2-135M-Instruct (GGUF, Q4_1) against transformers loading the same file."""

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import torch_logits
from rubric_jax import generate
from rubric_jax.sampling import sample

XLA_OPTIMIZED = True  # the real SmolLM2 runs in it (conftest._xla_optimisation)

TEXT = ("The old lighthouse keeper climbed the stairs every evening, counting each step as his father had "
        "taught him, and at the top he wiped the salt from the glass before lighting the lamp.")


@pytest.mark.slow
def test_logits_match_transformers_gguf(smollm2, smollm2_tokenizer, hf_smollm2):
    ids = smollm2_tokenizer.encode(TEXT)
    assert len(ids) > 30
    ref = torch_logits(hf_smollm2, [ids])
    ours, _ = smollm2(jnp.asarray([ids]))
    assert np.abs(np.asarray(ours) - ref).max() <= 1e-3


@pytest.mark.slow
def test_greedy_continuation_matches_transformers(smollm2, smollm2_tokenizer, hf_smollm2):
    import torch

    ids = smollm2_tokenizer.encode_chat("Describe a quiet morning in a small fishing village.")
    with torch.no_grad():
        ref = hf_smollm2.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, min_new_tokens=32,
                                  pad_token_id=smollm2_tokenizer.pad_id)[0, len(ids):].tolist()
    out = sample(smollm2, [ids], max_new_tokens=32, temperature=0.0, eos_ids=(-1,), pad_id=smollm2_tokenizer.pad_id)
    assert out.tokens[0].tolist() == ref


@pytest.mark.slow
def test_chat_answer_mentions_paris(smollm2, smollm2_tokenizer):
    text = generate(smollm2, smollm2_tokenizer, ["What is the capital of France?"], max_new_tokens=24,
                    temperature=0.0)[0]
    assert "Paris" in text


def test_tokenizer_from_gguf_metadata(smollm2_tokenizer):
    tok = smollm2_tokenizer
    assert tok.vocab_size == 49152
    assert tok.decode(tok.encode("Hello world")) == "Hello world"
    # <|im_end|> ends a turn, <|endoftext|> ends a document: both stop generation.
    assert tok.eos_ids[0] == tok.token_id("<|im_end|>") and tok.token_id("<|endoftext|>") in tok.eos_ids
    chat = tok.chat("Hi")
    assert chat.startswith("<|im_start|>") and chat.endswith("<|im_start|>assistant\n")

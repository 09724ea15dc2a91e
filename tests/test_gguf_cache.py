"""rubric_jax.models.gguf_cache: a GGUF checkpoint is converted once into a safetensors directory and read
from there afterwards, giving the same model and tokenizer as reading the GGUF file itself."""

import logging
import os

import numpy as np
import pytest
from flax import nnx

from rubric_jax.models import gguf_cache
from rubric_jax.models.loading import CheckpointFileError, load_gguf_model, load_model

LAYERS, HIDDEN, HEADS, KV, HEAD_DIM, INTER, VOCAB = 2, 32, 4, 2, 8, 64, 96


def _write_tiny_gguf(path, seed=0):
    """A random two-layer Qwen3 in GGUF (float32 tensors, no vocabulary), written with the gguf package."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name("tiny-gguf")
    w.add_block_count(LAYERS)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_context_length(256)
    w.add_vocab_size(VOCAB)
    w.add_eos_token_id(3)
    t = lambda *shape: (0.2 * rng.standard_normal(shape)).astype(np.float32)
    w.add_tensor("token_embd.weight", t(VOCAB, HIDDEN))
    w.add_tensor("output_norm.weight", 1 + t(HIDDEN))
    for i in range(LAYERS):
        for name, shape in (("attn_norm", (HIDDEN,)), ("ffn_norm", (HIDDEN,)), ("attn_q_norm", (HEAD_DIM,)),
                            ("attn_k_norm", (HEAD_DIM,)), ("attn_q", (HEADS * HEAD_DIM, HIDDEN)),
                            ("attn_k", (KV * HEAD_DIM, HIDDEN)), ("attn_v", (KV * HEAD_DIM, HIDDEN)),
                            ("attn_output", (HIDDEN, HEADS * HEAD_DIM)), ("ffn_gate", (INTER, HIDDEN)),
                            ("ffn_up", (INTER, HIDDEN)), ("ffn_down", (HIDDEN, INTER))):
            w.add_tensor(f"blk.{i}.{name}.weight", t(*shape) + (1 if "norm" in name else 0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def _params(model):
    return {k: np.asarray(v) for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def _assert_same_model(a, b):
    assert a.cfg == b.cfg
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k], err_msg=str(k))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "model_cache"
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(root))
    return root


def _forbid_gguf_reads(monkeypatch):
    import gguf

    def refuse(*a, **k):
        raise AssertionError("the GGUF file was read again")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)


def test_the_first_load_converts_and_later_loads_read_the_copy(tmp_path, cache, monkeypatch):
    path = _write_tiny_gguf(tmp_path / "tiny.gguf")
    direct = load_gguf_model(path)
    assert direct.cfg.name == "tiny-gguf" and direct.cfg.eos_token_ids == (3,)
    first = load_model(path)  # converts
    copy = gguf_cache.cached(path)
    assert copy is not None and os.path.dirname(copy) == str(cache)
    assert sorted(os.listdir(cache)) == [os.path.basename(copy)]  # no partial directory left beside it
    assert {"config.json", "model.safetensors", "source.json"} <= set(os.listdir(copy))
    _forbid_gguf_reads(monkeypatch)
    second = load_model(path)  # from the copy alone
    _assert_same_model(first, direct)
    _assert_same_model(second, direct)  # the config (with the GGUF's name) and every tensor, bit for bit


def test_a_changed_file_is_converted_again(tmp_path, cache):
    path = _write_tiny_gguf(tmp_path / "tiny.gguf", seed=0)
    load_model(path)
    old = gguf_cache.cached(path)
    _write_tiny_gguf(tmp_path / "tiny.gguf", seed=1)
    os.utime(path, ns=(os.stat(old + "/source.json").st_mtime_ns + 10**9,) * 2)  # a clearly newer file
    assert gguf_cache.cached(path) is None
    _assert_same_model(load_model(path), load_gguf_model(path))
    assert gguf_cache.cached(path) not in (None, old)


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_cache.CACHE_ENV, "none")
    path = _write_tiny_gguf(tmp_path / "tiny.gguf")
    assert gguf_cache.cache_root() is None and gguf_cache.converted(path) is None
    _assert_same_model(load_model(path), load_gguf_model(path))
    assert not any(p.name.startswith("tiny-") for p in tmp_path.iterdir())


def test_an_unwritable_cache_reads_the_file_directly_with_a_warning(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(blocker / "cache"))
    path = _write_tiny_gguf(tmp_path / "tiny.gguf")
    with caplog.at_level(logging.WARNING, logger=gguf_cache.__name__):
        model = load_model(path)
    assert "not writable" in caplog.text and "tiny.gguf" in caplog.text
    _assert_same_model(model, load_gguf_model(path))


def test_a_truncated_file_is_named_and_leaves_no_copy(tmp_path, cache):
    path = _write_tiny_gguf(tmp_path / "tiny.gguf")
    data = open(path, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointFileError, match="cut.gguf"):
        load_model(str(cut))
    assert gguf_cache.cached(str(cut)) is None and list(cache.iterdir()) == []


def test_a_copy_finished_by_another_process_first_is_used(tmp_path, cache, monkeypatch):
    """Two processes converting at once: the one that renames second keeps the first one's copy."""
    path = _write_tiny_gguf(tmp_path / "tiny.gguf")
    real = gguf_cache._write_copy

    def write_while_another_process_finishes(src, out):
        real(src, out)
        other = gguf_cache.copy_dir(src, str(cache))  # the other process's copy, finished meanwhile
        os.makedirs(other)
        real(src, other)

    monkeypatch.setattr(gguf_cache, "_write_copy", write_while_another_process_finishes)
    copy = gguf_cache.converted(path)
    assert copy == gguf_cache.copy_dir(path, str(cache)) and gguf_cache.cached(path) == copy
    assert sorted(os.listdir(cache)) == [os.path.basename(copy)]  # ours was dropped, not left half-named
    monkeypatch.setattr(gguf_cache, "_write_copy", real)
    _assert_same_model(load_model(path), load_gguf_model(path))


def test_a_tokenizer_only_copy_reads_no_tensor(tmp_path, cache, monkeypatch):
    """load_tokenizer of a GGUF file writes a tokenizer-only copy: the tensors are neither read nor converted.
    This file has no vocabulary, so there is no tokenizer to give (the SmolLM2 test below reads a real one)."""
    import rubric_jax.models.loading as loading

    path = _write_tiny_gguf(tmp_path / "tiny.gguf")

    def refuse(*a, **k):
        raise AssertionError("the tensors were read")

    monkeypatch.setattr(loading, "gguf_tensors", refuse)
    assert gguf_cache.tokenizer_dir(path) is None
    (copy,) = os.listdir(cache)
    assert copy.endswith("-tokenizer") and sorted(os.listdir(cache / copy)) == ["source.json"]
    assert gguf_cache.cached(path) is None  # the model itself is still to convert
    monkeypatch.undo()
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(cache))
    assert gguf_cache.converted(path) is not None  # and a full copy is what a later call finds first
    assert gguf_cache.tokenizer_dir(path) is None


@pytest.mark.slow
@pytest.mark.smollm2
def test_the_embedded_models_copy_equals_its_gguf_file(smollm2_path, tmp_path, monkeypatch):
    """The embedded SmolLM2 read through its converted copy (the session's model cache, tests/conftest.py) and
    read from the GGUF file itself: the same config, every tensor bit for bit, and a tokenizer that encodes,
    decodes and chat-formats alike (about 25 s: the direct read is the slow path the cache exists to avoid)."""
    from transformers import AutoTokenizer

    from rubric_jax.models.tokenizer import load_tokenizer

    copy = gguf_cache.converted(smollm2_path)
    assert copy is not None
    _assert_same_model(load_model(smollm2_path), load_gguf_model(smollm2_path))
    direct = AutoTokenizer.from_pretrained(os.path.dirname(smollm2_path), gguf_file=os.path.basename(smollm2_path))
    # the full copy's tokenizer, and a tokenizer-only copy (what load_tokenizer writes when no full copy exists)
    monkeypatch.setenv(gguf_cache.CACHE_ENV, str(tmp_path / "tokenizer_only"))
    only = gguf_cache.tokenizer_dir(smollm2_path)
    assert only.endswith("-tokenizer") and not os.path.exists(os.path.join(only, "model.safetensors"))
    for ours in (load_tokenizer.__wrapped__(copy).hf, AutoTokenizer.from_pretrained(only)):
        texts = ["Write a short poem about the sea.", "  Leading spaces,\ttabs\nand new lines  ",
                 "Émojis 🙂 and accents: café, naïve", "<|im_start|>user\nhi<|im_end|>", "12345 + 678 = ?"]
        for t in texts:
            assert ours.encode(t) == direct.encode(t), t
            assert ours.decode(direct.encode(t)) == direct.decode(direct.encode(t))
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
        assert (ours.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
                == direct.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
        assert ours.eos_token_id == direct.eos_token_id and ours.bos_token_id == direct.bos_token_id
        assert len(ours) == len(direct)

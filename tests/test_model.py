"""Model parity with transformers on tiny random checkpoints, config parsing, presets, loader errors."""

import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import torch_logits, write_tiny_checkpoint
from rubric_jax import CheckpointError, ModelConfig, load_model
from rubric_jax.models.config import PRESETS
from rubric_jax.models.transformer import KVCache, abstract_model, param_count


def _random_batch(vocab, b=3, t=40, seed=0):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, vocab, (b, t))
    mask = np.ones((b, t), bool)
    mask[1, :7] = False  # left padding
    mask[2, :23] = False
    return tokens, mask


def _check_parity(ckpt_dir, hf_model, vocab, tol=1e-4):
    model = load_model(ckpt_dir)
    tokens, mask = _random_batch(vocab)
    ref = torch_logits(hf_model, tokens, mask.astype(int))
    ours, _ = model(jnp.asarray(tokens), mask_bt=jnp.asarray(mask))
    diff = np.abs(np.asarray(ours) - ref)[mask]
    assert diff.max() <= tol, diff.max()
    return model


@pytest.mark.slow
def test_qwen3_tied_parity(tiny_qwen3):
    d, hf = tiny_qwen3
    model = _check_parity(d, hf, 151936)
    assert model.cfg.tie_word_embeddings and model.cfg.head_dim * model.cfg.num_heads != model.cfg.hidden_size
    assert model.cfg.num_kv_heads < model.cfg.num_heads  # GQA


def test_qwen3_untied_sharded_checkpoint_parity(tmp_path):
    hf = write_tiny_checkpoint(str(tmp_path), "qwen3", tied=False, seed=1, shard=True, vocab_size=4096)
    assert os.path.exists(tmp_path / "model.safetensors.index.json")
    model = _check_parity(str(tmp_path), hf, 4096)
    assert not model.cfg.tie_word_embeddings


def test_llama3_rope_scaling_parity(tmp_path):
    hf = write_tiny_checkpoint(str(tmp_path), "llama", tied=False, seed=2, vocab_size=4096, num_key_value_heads=1)
    model = _check_parity(str(tmp_path), hf, 4096)
    assert model.cfg.rope_scaling_dict["factor"] == 8.0
    # The test positions (up to 40) exceed original_max_position_embeddings / high_freq_factor = 16,
    # and the scaled inverse frequencies really differ from the unscaled ones.
    from rubric_jax.models.transformer import rope_inv_freq

    assert not np.allclose(rope_inv_freq(model.cfg), rope_inv_freq(model.cfg.replace(rope_scaling=None)))


@pytest.mark.slow
def test_bf16_params_close_to_f32(tiny_qwen3):
    d, _ = tiny_qwen3
    m32, m16 = load_model(d), load_model(d, dtype=jnp.bfloat16)
    assert m16.embed_tokens.embedding.get_value().dtype == jnp.bfloat16
    tokens, mask = _random_batch(151936, t=16)
    a, _ = m32(jnp.asarray(tokens), mask_bt=jnp.asarray(mask))
    b, _ = m16(jnp.asarray(tokens), mask_bt=jnp.asarray(mask))
    assert b.dtype == jnp.float32  # logits accumulate in f32
    assert np.abs(np.asarray(a) - np.asarray(b))[mask].mean() < 0.05


def test_config_accepts_old_and_new_keys():
    base = dict(model_type="llama", vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    old = ModelConfig.from_hf_dict({**base, "rope_theta": 5e5, "torch_dtype": "bfloat16",
                                    "rope_scaling": {"rope_type": "llama3", **scaling}})
    new = ModelConfig.from_hf_dict({**base, "dtype": "bfloat16",
                                    "rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, **scaling}})
    assert old == new
    assert old.rope_theta == 5e5 and old.head_dim == 16 and old.rope_scaling_dict["factor"] == 8.0
    assert ModelConfig.hf_dtype({"torch_dtype": "bfloat16"}) == ModelConfig.hf_dtype({"dtype": "bfloat16"})
    with pytest.raises(ValueError, match="model_type"):
        ModelConfig.from_hf_dict({**base, "model_type": "gpt2"})
    with pytest.raises(ValueError, match="rope scaling"):
        ModelConfig.from_hf_dict({**base, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})


@pytest.mark.parametrize("name", ["qwen3-4b", "qwen3-8b"])
def test_preset_param_counts_match_transformers(name):
    """eval_shape sizes the preset without allocating; transformers on the meta device is the reference."""
    import torch
    import transformers

    cfg = PRESETS[name]
    ours = param_count(abstract_model(cfg, dtype=jnp.bfloat16))
    hf_cfg = transformers.Qwen3Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, tie_word_embeddings=cfg.tie_word_embeddings)
    with torch.device("meta"):
        hf = transformers.Qwen3ForCausalLM(hf_cfg)
    ref = sum(p.numel() for p in hf.parameters())
    assert ours == ref
    assert ours == {"qwen3-4b": 4_022_468_096, "qwen3-8b": 8_190_735_360}[name]  # published totals


def test_loader_errors_name_the_tensor(tiny_qwen3, tmp_path):
    from safetensors.numpy import load_file, save_file

    src, _ = tiny_qwen3
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), tmp_path / f)
    tensors = load_file(str(tmp_path / "model.safetensors"))

    bad = dict(tensors)
    bad["model.layers.1.mlp.up_proj.weight"] = bad["model.layers.1.mlp.up_proj.weight"][:, :10]
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\.mlp\.up_proj\.weight.*\(128, 10\).*\(128, 64\)"):
        load_model(str(tmp_path))

    bad = dict(tensors)
    del bad["model.layers.0.self_attn.k_norm.weight"]
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.0\.self_attn\.k_norm\.weight'"):
        load_model(str(tmp_path))

    bad = dict(tensors, **{"model.layers.0.extra.weight": np.zeros(3, np.float32)})
    save_file(bad, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'model\.layers\.0\.extra\.weight'"):
        load_model(str(tmp_path))

    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_model(str(tmp_path / "nope"))


def _llamacpp_permute(w, n_head):
    # Forward permutation as llama.cpp's converter writes Llama q/k (written independently of the loader).
    out = np.empty_like(w)
    h = w.shape[0] // n_head
    for head in range(n_head):
        rows = w[head * h:(head + 1) * h]
        first, second = rows[: h // 2], rows[h // 2:]
        inter = np.empty_like(rows)
        inter[0::2], inter[1::2] = first, second
        out[head * h:(head + 1) * h] = inter
    return out


@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.slow
def test_gguf_loader_matches_dequantised_reference(tmp_path, qtype):
    """A tiny Llama written as GGUF (llama.cpp naming and q/k permutation) loads to the same logits as
    transformers running the same dequantised weights."""
    import gguf
    import torch
    from gguf import quants

    hf = write_tiny_checkpoint(str(tmp_path / "hf"), "llama", tied=False, seed=3, vocab_size=512,
                               rope_scaling=None)
    cfg = hf.config
    qt = getattr(gguf.GGMLQuantizationType, qtype)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer_names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                   "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                   "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                   "mlp.down_proj": "ffn_down"}
    w = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), "llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None)
                         else float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_context_length(512)
    w.add_vocab_size(512)
    sd = {k: v.detach().numpy().copy() for k, v in hf.state_dict().items()}
    with torch.no_grad():
        for k, v in sd.items():
            gname = names.get(k)
            if gname is None:
                parts = k.split(".")
                gname = f"blk.{parts[2]}.{layer_names['.'.join(parts[3:-1])]}.weight"
            if v.ndim == 2:
                deq = quants.dequantize(quants.quantize(v, qt), qt).astype(np.float32).reshape(v.shape)
                hf.state_dict()[k].copy_(torch.from_numpy(deq))  # reference sees the same rounding
                store = deq
                if k.endswith("q_proj.weight"):
                    store = _llamacpp_permute(deq, cfg.num_attention_heads)
                elif k.endswith("k_proj.weight"):
                    store = _llamacpp_permute(deq, cfg.num_key_value_heads)
                w.add_tensor(gname, quants.quantize(store, qt), raw_dtype=qt)
            else:
                w.add_tensor(gname, v.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model = load_model(str(tmp_path / "tiny.gguf"))
    tokens, mask = _random_batch(512, t=20)
    ref = torch_logits(hf, tokens, mask.astype(int))
    ours, _ = model(jnp.asarray(tokens), mask_bt=jnp.asarray(mask))
    assert np.abs(np.asarray(ours) - ref)[mask].max() <= 1e-4


@pytest.mark.slow
def test_cached_chunks_equal_full_forward(tiny_qwen3_model):
    """Prefill, multi-token chunk and single-token decode against the cache reproduce the full pass."""
    model = tiny_qwen3_model
    tokens, mask = _random_batch(151936, t=24, seed=5)
    full, _ = model(jnp.asarray(tokens), mask_bt=jnp.asarray(mask))
    cache = KVCache.empty(model.cfg, 3, 32)
    pieces = []
    for lo, hi in [(0, 10), (10, 16), (16, 17), (17, 18), (18, 24)]:
        out, cache = model(jnp.asarray(tokens[:, lo:hi]), mask_bt=jnp.asarray(mask[:, lo:hi]), cache=cache)
        pieces.append(np.asarray(out))
    stitched = np.concatenate(pieces, axis=1)
    assert np.abs(stitched - np.asarray(full))[mask].max() <= 1e-4
    assert int(cache.index) == 24 and cache.lengths().tolist() == mask.sum(1).tolist()


@pytest.mark.slow
def test_per_layer_cache_writes_first_and_matches_the_stacked_cache(tiny_qwen3_model):
    """Decode over per-layer caches (the sampler's loop) writes each one-token step's keys into the cache
    before attending (one key block); chunks and steps must give the stacked cache's logits and cache.
    Slow tier: 14 s on 2 cores, each chunk and step compiled on both cache layouts."""
    model = tiny_qwen3_model
    tokens, mask = _random_batch(151936, t=12, seed=7)  # row 1 starts at 7, row 2 is all padding
    mask[0, 9] = False  # a step whose token is padding after real ones: its slot stays invalid on both paths
    layers = model.unstacked_layers()
    stacked = KVCache.empty(model.cfg, 3, 16)
    per_layer = stacked.unstack()
    for lo, hi in [(0, 6), (6, 7), (7, 8), (8, 9), (9, 10), (10, 12)]:
        chunk = (jnp.asarray(tokens[:, lo:hi]), jnp.asarray(mask[:, lo:hi]))
        want, stacked = model(chunk[0], mask_bt=chunk[1], cache=stacked)
        got, per_layer = model(chunk[0], mask_bt=chunk[1], cache=per_layer, layers=layers)
        real = mask[:, lo:hi]  # a padding query sees no real key: its output is unused on both paths
        assert real.any() and np.abs(np.asarray(got) - np.asarray(want))[real].max() <= 1e-5, (lo, hi)
    assert int(per_layer.index) == int(stacked.index) == 12
    np.testing.assert_array_equal(np.asarray(per_layer.valid_bs), np.asarray(stacked.valid_bs))
    valid = np.asarray(stacked.valid_bs)  # keys of padding tokens come from unused outputs (above)
    for got, want in ((per_layer.k, stacked.k), (per_layer.v, stacked.v)):
        got, want = np.stack(got).transpose(0, 1, 3, 2, 4), np.asarray(want).transpose(0, 1, 3, 2, 4)
        np.testing.assert_allclose(got[:, valid], want[:, valid], atol=1e-5)


@pytest.mark.slow
def test_chunk_tree_mask_scores_suffixes_as_if_alone(tiny_qwen3_model):
    """Two suffixes packed in one chunk after a cached prefix, each blind to the other, give the same
    logits as [prefix + suffix] run separately from scratch."""
    model = tiny_qwen3_model
    rng = np.random.RandomState(7)
    prefix, s1, s2 = rng.randint(0, 151936, 9), rng.randint(0, 151936, 4), rng.randint(0, 151936, 3)
    cache = KVCache.empty(model.cfg, 1, 32)
    _, cache = model(jnp.asarray([prefix]), cache=cache)
    chunk = np.concatenate([s1, s2])[None]
    seg = np.array([1] * 4 + [2] * 3)
    tree = (seg[:, None] == seg[None, :]) & (np.arange(7)[None, :] <= np.arange(7)[:, None])
    positions = 9 + np.concatenate([np.arange(4), np.arange(3)])[None]
    out, _ = model(jnp.asarray(chunk), jnp.asarray(positions), cache=cache, chunk_mask_btt=jnp.asarray(tree[None]))
    for suffix, sl in ((s1, slice(0, 4)), (s2, slice(4, 7))):
        ref, _ = model(jnp.asarray([np.concatenate([prefix, suffix])]))
        np.testing.assert_allclose(np.asarray(out[0, sl]), np.asarray(ref[0, 9:]), atol=1e-4)
    # Without the tree mask the second suffix would see the first: the check above can fail.
    plain, _ = model(jnp.asarray(chunk), jnp.asarray(positions), cache=cache)
    assert np.abs(np.asarray(plain[0, 4:]) - np.asarray(out[0, 4:])).max() > 1e-3


@pytest.mark.slow
def test_a_directorys_tokenizer_equals_transformers_autotokenizer(tiny_qwen3):
    """load_tokenizer reads a tokenizer.json directory with the generic fast class (no torch import at start);
    it must encode, decode and chat-format exactly like AutoTokenizer's Qwen2 class for the same files."""
    from transformers import AutoTokenizer

    from rubric_jax.models.tokenizer import load_tokenizer

    auto = AutoTokenizer.from_pretrained(tiny_qwen3[0])
    ours = load_tokenizer.__wrapped__(tiny_qwen3[0])
    assert type(ours.hf).__name__ != type(auto).__name__  # the two paths really differ
    texts = ["Write a short poem about the sea.", "  Leading spaces,\ttabs\nand new lines  ", "Émojis 🙂 数学 café",
             "<|im_start|>user\nhi<|im_end|>", "<think>\nplan\n</think>\n\nanswer", "12345 + 678 = ?"]
    for t in texts:
        ids = auto.encode(t, add_special_tokens=False)
        assert ours.encode(t) == ids, t
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == auto.decode(ids, skip_special_tokens=skip)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."}, {"role": "user", "content": "Another?"}]
    for gen in (True, False):
        assert ours.chat(chat, add_generation_prompt=gen) == auto.apply_chat_template(
            chat, tokenize=False, add_generation_prompt=gen, enable_thinking=False)
    assert ours.eos_ids[0] == auto.eos_token_id and ours.pad_id == auto.pad_token_id
    assert ours.vocab_size == len(auto) and ours.hf.all_special_ids == auto.all_special_ids
    # Only special tokens end a sequence: "</s>" is ordinary text in Qwen's vocabulary (one BPE token).
    assert ours.eos_ids == (151645, 151643) and ours.decode([128247]) == "</s>"


@pytest.mark.slow
def test_loading_a_tokenizer_does_not_import_torch(tiny_qwen3):
    """Every command loads a tokenizer at start; through AutoTokenizer that imported torch (installed with the
    test extras) for ~3 s per process. A fresh interpreter shows what a command's start imports."""
    import subprocess
    import sys

    code = ("import sys; from rubric_jax import load_tokenizer; t = load_tokenizer(sys.argv[1]); "
            "print(t.encode('hello world'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, tiny_qwen3[0]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "False", out.stdout

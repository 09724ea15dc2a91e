"""The Qwen2 family (Llama layout plus biases on the q, k and v projections) against transformers'
Qwen2ForCausalLM on tiny random checkpoints: safetensors tied and untied, GGUF with Q4_K and Q6_K blocks,
LoRA at init, scan/unrolled layers, sharding of the biases, and export (merged HF and PEFT) read back by
transformers and peft. Every bias is random and non-zero, so a dropped, misnamed or mis-shaped bias moves
the logits far past the tolerance."""

import json
import types

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import torch_logits, write_tiny_checkpoint

TOL = 1e-4
VOCAB = 512


def _batch(t=20, seed=0):
    rng = np.random.RandomState(seed)
    tokens = rng.randint(0, VOCAB, (3, t))
    mask = np.ones((3, t), bool)
    mask[1, :5] = False  # left padding
    mask[2, :11] = False
    return tokens, mask


def _ours(model, tokens, mask):
    return np.asarray(model(jnp.asarray(tokens), mask_bt=jnp.asarray(mask))[0])


def _max_diff(model, hf, t=20, seed=0):
    tokens, mask = _batch(t, seed)
    return float(np.abs(_ours(model, tokens, mask) - torch_logits(hf, tokens, mask.astype(int)))[mask].max())


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def tiny_qwen2(request, tmp_path_factory):
    d = str(tmp_path_factory.mktemp("qwen2_" + ("tied" if request.param else "untied")))
    hf = write_tiny_checkpoint(d, "qwen2", tied=request.param, seed=11 if request.param else 12, vocab_size=VOCAB)
    return d, hf


@pytest.mark.slow
def test_qwen2_safetensors_parity_lora_and_scan(tiny_qwen2):
    from rubric_jax import load_model
    from rubric_jax.models.lora import LoRAConfig, apply_lora

    d, hf = tiny_qwen2
    biases = {k: v for k, v in hf.state_dict().items() if k.endswith(".bias")}
    assert len(biases) == 3 * 2 and all(float(v.abs().min()) > 0 for v in biases.values())
    model = load_model(d)
    assert model.cfg.arch == "qwen2" and model.cfg.qkv_bias and not model.cfg.qk_norm
    assert model.cfg.tie_word_embeddings == hf.config.tie_word_embeddings
    assert model.layers.self_attn.o_proj.bias is None  # Qwen2 has none on o_proj
    assert _max_diff(model, hf) <= TOL
    tokens, mask = _batch()
    ref = _ours(model, tokens, mask)
    # The loaded biases matter: without them the logits move far past the tolerance.
    q = model.layers.self_attn.q_proj.bias
    saved = q.get_value()
    q.set_value(jnp.zeros_like(saved))
    assert np.abs(_ours(model, tokens, mask) - ref)[mask].max() > 100 * TOL
    q.set_value(saved)
    model.configure(scan_layers=False)
    np.testing.assert_allclose(_ours(model, tokens, mask), ref, atol=TOL, rtol=0)
    model.configure(scan_layers=True)
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0), seed=3)  # B = 0: the base model exactly
    np.testing.assert_array_equal(_ours(model, tokens, mask), ref)


@pytest.mark.slow
def test_qwen2_export_merged_and_peft_load_in_transformers(tiny_qwen2, tmp_path):
    import peft
    import torch
    import transformers

    from rubric_jax import load_model
    from rubric_jax.models.export import export_hf, export_peft
    from rubric_jax.models.lora import LoRAConfig, apply_lora, lora_modules

    d, _ = tiny_qwen2
    cfg = LoRAConfig(rank=4, alpha=8.0)
    model = apply_lora(load_model(d), cfg, seed=5)
    rs = np.random.RandomState(5)
    for _, mod in lora_modules(model):
        b = mod.lora_b.get_value()
        mod.lora_b.set_value(jnp.asarray(0.1 * rs.standard_normal(b.shape), b.dtype))
    tokens = np.random.RandomState(1).randint(0, VOCAB, (2, 9))
    ours = np.asarray(model(tokens)[0])
    export_hf(model, str(tmp_path / "merged"))
    conf = json.load(open(tmp_path / "merged" / "config.json"))
    assert conf["model_type"] == "qwen2" and conf["architectures"] == ["Qwen2ForCausalLM"]
    merged = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "merged"), dtype=torch.float32).eval()
    assert isinstance(merged, transformers.Qwen2ForCausalLM)
    np.testing.assert_allclose(torch_logits(merged, tokens), ours, atol=TOL, rtol=0)
    np.testing.assert_allclose(np.asarray(load_model(str(tmp_path / "merged"))(tokens)[0]), ours, atol=TOL, rtol=0)
    export_peft(model, str(tmp_path / "peft"), base_model_name_or_path=d, lora_cfg=cfg)
    base = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    pm = peft.PeftModel.from_pretrained(base, str(tmp_path / "peft")).eval()
    np.testing.assert_allclose(torch_logits(pm, tokens), ours, atol=TOL, rtol=0)


# ---------------------------------------------------------------------------------------------
# GGUF: llama.cpp's qwen2 layout (no q/k permutation), K-quant blocks made from random bytes.

_BLOCK = {"Q4_K": 144, "Q6_K": 210}  # bytes per 256 weights


def _random_kquant(rows, cols, qname, rng):
    """Random bytes of `rows` x `cols` weights in K-quant blocks, with small finite f16 scales (the
    quantiser is not in gguf-py; its dequantiser is, and the reference runs what it reads back)."""
    import gguf
    from gguf import quants

    qt = getattr(gguf.GGMLQuantizationType, qname)
    nb = cols // 256
    raw = rng.randint(0, 256, (rows, nb, _BLOCK[qname])).astype(np.uint8)
    scale = np.full((rows, nb, 1), 0.0001 if qname == "Q4_K" else 0.00005, np.float16).view(np.uint8)
    if qname == "Q4_K":  # d, dmin (f16) lead the block
        raw[..., 0:2], raw[..., 2:4] = scale, scale
    else:  # d (f16) ends it
        raw[..., 208:210] = scale
    raw = raw.reshape(rows, nb * _BLOCK[qname])
    deq = np.asarray(quants.dequantize(raw, qt), np.float32).reshape(rows, cols)
    assert np.isfinite(deq).all() and 0.005 < deq.std() < 0.2, deq.std()
    return raw, qt, deq


@pytest.mark.slow
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_qwen2_gguf_k_quants_match_transformers(tmp_path, tied):
    import gguf
    import torch

    from rubric_jax import load_model

    hf = write_tiny_checkpoint(str(tmp_path / "hf"), "qwen2", tied=tied, seed=13, vocab_size=VOCAB,
                               hidden_size=256, intermediate_size=512, num_attention_heads=4,
                               num_key_value_heads=2)
    cfg = hf.config
    rng = np.random.RandomState(0)
    names = {"model.embed_tokens.weight": "token_embd", "model.norm.weight": "output_norm",
             "lm_head.weight": "output"}
    layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    w = gguf.GGUFWriter(str(tmp_path / "tiny.gguf"), "qwen2")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_context_length(512)
    state = hf.state_dict()
    with torch.no_grad():
        for k, v in state.items():
            if tied and k == "lm_head.weight":
                continue
            if k in names:
                gname = names[k] + ".weight"
            else:
                parts = k.split(".")
                gname = f"blk.{parts[2]}.{layer['.'.join(parts[3:-1])]}.{parts[-1]}"
            if v.ndim == 2:
                # As Q4_K_M does: Q6_K for v, down and the embeddings, Q4_K elsewhere.
                qname = "Q6_K" if any(s in k for s in ("v_proj", "down_proj", "embed", "lm_head")) else "Q4_K"
                raw, qt, deq = _random_kquant(v.shape[0], v.shape[1], qname, rng)
                state[k].copy_(torch.from_numpy(deq))  # the reference runs the dequantised weights
                w.add_tensor(gname, raw, raw_dtype=qt)
            else:
                w.add_tensor(gname, v.numpy().astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model = load_model(str(tmp_path / "tiny.gguf"))
    assert model.cfg.arch == "qwen2" and model.cfg.tie_word_embeddings == tied and model.cfg.head_dim == 64
    assert _max_diff(model, hf, t=12) <= TOL


def test_qwen2_config_parsing_and_bias_sharding():
    from jax.sharding import PartitionSpec

    from rubric_jax.models.config import PRESETS, ModelConfig
    from rubric_jax.models.sharding import logical_to_spec
    from rubric_jax.models.transformer import abstract_model

    base = dict(model_type="qwen2", vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2)
    cfg = ModelConfig.from_hf_dict(base)
    assert cfg.arch == "qwen2" and cfg.head_dim == 16 and cfg.qkv_bias
    # Windowed attention in any layer is refused, not run as full attention.
    with pytest.raises(ValueError, match="sliding-window"):
        ModelConfig.from_hf_dict({**base, "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1})
    assert ModelConfig.from_hf_dict({**base, "use_sliding_window": False, "sliding_window": 8}).arch == "qwen2"
    with pytest.raises(ValueError, match="attention_bias"):
        ModelConfig.from_hf_dict({**base, "model_type": "llama", "attention_bias": True})
    preset = PRESETS["qwen2.5-1.5b"]
    assert abstract_model(preset).layers.self_attn.k_proj.bias.get_value().shape == (28, 2, 128)
    # The biases shard with their kernel's output axes (heads over a tensor axis of 2).
    mesh = types.SimpleNamespace(shape={"data": 1, "tensor": 2})
    attn = abstract_model(cfg).layers.self_attn
    for proj, heads in (("q_proj", "heads"), ("k_proj", "kv_heads")):
        bias = getattr(attn, proj).bias
        assert bias.get_metadata()["axes"] == ("layers", heads, "head_dim")
        assert logical_to_spec(bias.get_metadata()["axes"], bias.get_value().shape, mesh) == PartitionSpec(
                None, "tensor", None)

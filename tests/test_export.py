"""Export: merged HF checkpoints load in transformers (and back in rubric_jax), PEFT adapters load in peft,
and both give our LoRA model's logits. Adapters have random non-zero B, so a wrong name, transpose or
flatten order of any A, B or merged kernel changes the logits far beyond the tolerance."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import torch_logits, write_tiny_checkpoint

TOL = 1e-4
TOKENS = np.random.RandomState(0).randint(0, 512, (2, 9))  # < the variants' small vocabulary


def _lora_model(ckpt_dir, seed=1, rank=4, alpha=8.0):
    """Loaded model with LoRA on every projection and random non-zero A and B."""
    from rubric_jax import load_model
    from rubric_jax.models.lora import LoRAConfig, apply_lora, lora_modules

    cfg = LoRAConfig(rank=rank, alpha=alpha)
    model = apply_lora(load_model(ckpt_dir), cfg, seed=seed)
    rs = np.random.RandomState(seed)
    for _, mod in lora_modules(model):
        b = mod.lora_b.get_value()
        mod.lora_b.set_value(jnp.asarray(0.1 * rs.standard_normal(b.shape), b.dtype))
    return model, cfg


def _logits(model):
    return np.asarray(model(TOKENS)[0])


def _hf(path):
    import torch
    import transformers

    torch.set_num_threads(2)
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _check_peft(model, cfg, base_dir, out_dir, ours):
    import peft

    export_dir = str(out_dir)
    from rubric_jax.models.export import export_peft

    export_peft(model, export_dir, base_model_name_or_path=base_dir, lora_cfg=cfg)
    conf = json.load(open(os.path.join(export_dir, "adapter_config.json")))
    assert conf["peft_type"] == "LORA" and conf["task_type"] == "CAUSAL_LM"
    assert conf["r"] == cfg.rank and conf["lora_alpha"] == cfg.alpha and conf["base_model_name_or_path"] == base_dir
    assert sorted(conf["target_modules"]) == sorted(cfg.targets)
    pm = peft.PeftModel.from_pretrained(_hf(base_dir), export_dir).eval()
    np.testing.assert_allclose(torch_logits(pm, TOKENS), ours, atol=TOL, rtol=0)


def test_hf_config_reads_back_as_the_same_model_config():
    """config.json written by the exporter (through JSON) parses back to the exported ModelConfig, for every preset:
    Qwen3 tied and untied, Llama 3 with its rope scaling, several eos ids."""
    from rubric_jax import PRESETS
    from rubric_jax.models.config import ModelConfig
    from rubric_jax.models.export import hf_config_dict

    for name, cfg in PRESETS.items():
        d = json.loads(json.dumps(hf_config_dict(cfg, dtype="bfloat16")))
        assert ModelConfig.hf_dtype(d) == "bfloat16"
        assert ModelConfig.from_hf_dict(d, name=cfg.name) == cfg, name
    with pytest.raises(ValueError, match="unsupported export dtype"):
        hf_config_dict(PRESETS["tiny"], dtype="int8")


@pytest.fixture(scope="module")
def lora_qwen3(tiny_qwen3, tiny_qwen3_model):
    model, cfg = _lora_model(tiny_qwen3[0])
    ours = _logits(model)
    # The adapters matter: a dropped or zeroed adapter could not pass the checks below.
    assert np.abs(ours - _logits(tiny_qwen3_model)).max() > 0.1
    return model, cfg, ours


@pytest.mark.slow
def test_export_hf_merged_loads_in_transformers_and_back(lora_qwen3, tiny_qwen3, qwen_tokenizer, tmp_path):
    from rubric_jax import load_model
    from rubric_jax.models.export import export_hf
    from rubric_jax.models.lora import lora_modules

    model, _, ours = lora_qwen3
    out = str(tmp_path / "merged")
    export_hf(model, out, tokenizer=qwen_tokenizer)
    # The passed model is untouched: still wrapped, same logits.
    assert len(lora_modules(model)) == 7  # one stacked wrapper per projection, spanning both layers
    np.testing.assert_array_equal(_logits(model), ours)

    conf = json.load(open(os.path.join(out, "config.json")))
    assert conf["model_type"] == "qwen3" and conf["head_dim"] == 32 and conf["tie_word_embeddings"] is True
    assert conf["dtype"] == conf["torch_dtype"] == "float32"
    assert os.path.exists(os.path.join(out, "model.safetensors"))
    from safetensors import safe_open

    with safe_open(os.path.join(out, "model.safetensors"), "np") as f:
        keys = set(f.keys())
        assert f.get_slice("model.layers.0.self_attn.o_proj.weight").get_shape() == [64, 4 * 32]
    assert "lm_head.weight" not in keys and not any("lora" in k for k in keys)

    np.testing.assert_allclose(torch_logits(_hf(out), TOKENS), ours, atol=TOL, rtol=0)
    np.testing.assert_allclose(_logits(load_model(out)), ours, atol=TOL, rtol=0)

    from transformers import AutoTokenizer

    text = "Exported <|im_end|> tokenizer"
    assert AutoTokenizer.from_pretrained(out).encode(text) == qwen_tokenizer.hf.encode(text)


@pytest.mark.slow
def test_export_peft_adapter_gives_our_logits(lora_qwen3, tiny_qwen3, tmp_path):
    from safetensors import safe_open

    model, cfg, ours = lora_qwen3
    _check_peft(model, cfg, tiny_qwen3[0], tmp_path / "adapter", ours)
    with safe_open(str(tmp_path / "adapter" / "adapter_model.safetensors"), "np") as f:
        keys = set(f.keys())
        p = "base_model.model.model.layers.1.self_attn.o_proj"
        assert f.get_slice(f"{p}.lora_A.weight").get_shape() == [cfg.rank, 4 * 32]  # (r, in)
        assert f.get_slice(f"{p}.lora_B.weight").get_shape() == [64, cfg.rank]  # (out, r)
    assert len(keys) == 2 * 2 * 7


@pytest.mark.parametrize("arch,tied,shard", [("qwen3", False, True), ("llama", False, False)])
@pytest.mark.slow
def test_export_variants(arch, tied, shard, tmp_path):
    """Untied lm_head, Llama 3 rope scaling, sharded output with an index; merged and adapter exports."""
    from rubric_jax import load_model
    from rubric_jax.models.export import export_hf

    src = str(tmp_path / "src")
    write_tiny_checkpoint(src, arch, tied=tied, seed=3, vocab_size=512)
    model, cfg = _lora_model(src, seed=2, alpha=5.0)
    ours = _logits(model)
    assert np.abs(ours - _logits(load_model(src))).max() > 0.1

    out = str(tmp_path / "merged")
    export_hf(model, out, max_shard_size="200KB" if shard else "5GB")
    conf = json.load(open(os.path.join(out, "config.json")))
    assert conf["model_type"] == arch and conf["tie_word_embeddings"] is tied
    if arch == "llama":
        assert conf["rope_scaling"]["rope_type"] == "llama3" and conf["rope_theta"] == 500000.0
    index = os.path.join(out, "model.safetensors.index.json")
    assert os.path.exists(index) == shard
    if shard:
        weight_map = json.load(open(index))["weight_map"]
        assert len(set(weight_map.values())) > 1 and "lm_head.weight" in weight_map
    np.testing.assert_allclose(torch_logits(_hf(out), TOKENS), ours, atol=TOL, rtol=0)
    np.testing.assert_allclose(_logits(load_model(out)), ours, atol=TOL, rtol=0)
    _check_peft(model, cfg, src, tmp_path / "adapter", ours)


@pytest.mark.slow
def test_export_bfloat16(lora_qwen3, tmp_path):
    from safetensors import safe_open

    from rubric_jax import load_model
    from rubric_jax.models.export import export_hf

    model, _, ours = lora_qwen3
    out = str(tmp_path / "bf16")
    export_hf(model, out, dtype="bfloat16")
    conf = json.load(open(os.path.join(out, "config.json")))
    assert conf["dtype"] == conf["torch_dtype"] == "bfloat16"
    with safe_open(os.path.join(out, "model.safetensors"), "flax") as f:
        assert str(f.get_tensor("model.embed_tokens.weight").dtype) == "bfloat16"
    got = _logits(load_model(out))
    assert np.abs(got - ours).max() < 0.02 * np.abs(ours).max()


@pytest.mark.slow
def test_export_errors(tiny_qwen3_model, lora_qwen3, tmp_path):
    from rubric_jax.models.export import export_hf, export_peft
    from rubric_jax.models.lora import LoRAConfig

    with pytest.raises(ValueError, match="no LoRA modules"):
        export_peft(tiny_qwen3_model, str(tmp_path / "a"), base_model_name_or_path="x")
    with pytest.raises(ValueError, match="unsupported export dtype"):
        export_hf(tiny_qwen3_model, str(tmp_path / "b"), dtype="int8")
    model, _, _ = lora_qwen3
    with pytest.raises(ValueError, match="does not match"):
        export_peft(model, str(tmp_path / "c"), base_model_name_or_path="x", lora_cfg=LoRAConfig(rank=8))
    assert not os.path.exists(tmp_path / "b" / "model.safetensors")

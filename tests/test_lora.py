"""LoRA applied from outside: exact base logits at init, merge/unmerge, adapters-off reference, dropout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rubric_jax.models.lora import (LoRAConfig, apply_lora, lora_disabled, lora_dropout, lora_modules,
                                    lora_param_count, merge_lora, unmerge_lora)

TOKENS = jnp.asarray(np.random.RandomState(0).randint(0, 151936, (2, 12)))


def _lora_model(base, cfg=LoRAConfig(rank=4, alpha=8.0), randomize=False):
    graphdef, state = nnx.split(base)
    model = apply_lora(nnx.merge(graphdef, state), cfg, seed=1)
    if randomize:
        for i, (_, _, mod) in enumerate(lora_modules(model)):
            b = mod.lora_b.get_value()
            mod.lora_b.set_value(jax.random.normal(jax.random.key(i), b.shape) * 0.05)
    return model


def test_zero_b_gives_exactly_the_base_logits(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model)
    base, _ = tiny_qwen3_model(TOKENS)
    out, _ = model(TOKENS)
    assert np.array_equal(np.asarray(base), np.asarray(out))
    # 2 layers x 7 projections; rank 4: A is in x 4, B is 4 x out.
    cfg = tiny_qwen3_model.cfg
    d, f, q, kv = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    per_layer = 4 * ((d + q) + 2 * (d + kv) + (q + d) + 2 * (d + f) + (f + d))
    assert lora_param_count(model) == cfg.num_layers * per_layer


def test_base_model_untouched_and_only_lora_trainable(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model, randomize=True)
    assert not lora_modules(tiny_qwen3_model)  # the base keeps its plain projections
    _, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
    assert all(isinstance(v, nnx.LoRAParam) for v in jax.tree.leaves(lora, is_leaf=lambda x: isinstance(x, nnx.Variable)))
    assert not any(isinstance(v, nnx.LoRAParam) for v in jax.tree.leaves(rest, is_leaf=lambda x: isinstance(x, nnx.Variable)))


def test_merged_weights_give_the_adapters_logits_and_unmerge_restores(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model, randomize=True)
    with_adapters, _ = model(TOKENS)
    base, _ = tiny_qwen3_model(TOKENS)
    assert np.abs(np.asarray(with_adapters) - np.asarray(base)).max() > 1e-3  # the adapters do something
    with lora_disabled():
        off, _ = model(TOKENS)
    np.testing.assert_array_equal(np.asarray(off), np.asarray(base))

    adapters = {(li, name): mod for li, name, mod in lora_modules(model)}
    merged = merge_lora(model)
    assert not lora_modules(merged)
    out, _ = merged(TOKENS)
    np.testing.assert_allclose(np.asarray(out), np.asarray(with_adapters), atol=1e-4)
    unmerge_lora(merged, adapters)
    back, _ = merged(TOKENS)
    np.testing.assert_allclose(np.asarray(back), np.asarray(with_adapters), atol=1e-4)
    with lora_disabled():
        off, _ = merged(TOKENS)
    np.testing.assert_allclose(np.asarray(off), np.asarray(base), atol=1e-4)


def test_dropout_only_inside_its_context(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model, LoRAConfig(rank=4, alpha=8.0, dropout=0.5), randomize=True)
    plain1, _ = model(TOKENS)
    plain2, _ = model(TOKENS)
    np.testing.assert_array_equal(np.asarray(plain1), np.asarray(plain2))
    with lora_dropout(jax.random.key(0)):
        d1, _ = model(TOKENS)
    with lora_dropout(jax.random.key(1)):
        d2, _ = model(TOKENS)
    assert np.abs(np.asarray(d1) - np.asarray(plain1)).max() > 1e-4
    assert np.abs(np.asarray(d1) - np.asarray(d2)).max() > 1e-4


def test_bad_config_errors():
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        LoRAConfig(targets=("q_proj", "qkv"))
    with pytest.raises(ValueError, match="rank"):
        LoRAConfig(rank=0)

"""LoRA applied from outside: exact base logits at init, merge/unmerge, adapters-off reference, dropout,
explicit switches that a jitted function honours (no trace-time globals)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rubric_jax.models.lora import (ALL_TARGETS, LoRAConfig, apply_lora, lora_modules, lora_param_count, low_rank,
                                    merge_lora, set_lora, unmerge_lora)

TOKENS = jnp.asarray(np.random.RandomState(0).randint(0, 151936, (2, 12)))


def _lora_model(base, cfg=LoRAConfig(rank=4, alpha=8.0), randomize=False):
    graphdef, state = nnx.split(base)
    model = apply_lora(nnx.merge(graphdef, state), cfg, seed=1)
    if randomize:
        for i, (_, mod) in enumerate(lora_modules(model)):
            b = mod.lora_b.get_value()
            mod.lora_b.set_value(jax.random.normal(jax.random.key(i), b.shape) * 0.05)
    return model


@pytest.mark.slow
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


@pytest.mark.slow
def test_base_model_untouched_and_only_lora_trainable(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model, randomize=True)
    assert not lora_modules(tiny_qwen3_model)  # the base keeps its plain projections
    _, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
    assert all(isinstance(v, nnx.LoRAParam) for v in jax.tree.leaves(lora, is_leaf=lambda x: isinstance(x, nnx.Variable)))
    assert not any(isinstance(v, nnx.LoRAParam) for v in jax.tree.leaves(rest, is_leaf=lambda x: isinstance(x, nnx.Variable)))


@pytest.mark.slow
def test_merged_weights_give_the_adapters_logits_and_unmerge_restores(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model, randomize=True)
    with_adapters, _ = model(TOKENS)
    base, _ = tiny_qwen3_model(TOKENS)
    assert np.abs(np.asarray(with_adapters) - np.asarray(base)).max() > 1e-3  # the adapters do something
    off, _ = set_lora(model, enabled=False)(TOKENS)
    np.testing.assert_array_equal(np.asarray(off), np.asarray(base))
    set_lora(model, enabled=True)

    adapters = merge_lora(model)
    merged = model
    assert sorted(adapters) == sorted(ALL_TARGETS)
    assert not lora_modules(merged)
    out, _ = merged(TOKENS)
    np.testing.assert_allclose(np.asarray(out), np.asarray(with_adapters), atol=1e-4)
    unmerge_lora(merged, adapters)
    back, _ = merged(TOKENS)
    np.testing.assert_allclose(np.asarray(back), np.asarray(with_adapters), atol=1e-4)
    off, _ = set_lora(merged, enabled=False)(TOKENS)
    np.testing.assert_allclose(np.asarray(off), np.asarray(base), atol=1e-4)


@pytest.mark.slow
def test_dropout_only_when_switched_on(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model, LoRAConfig(rank=4, alpha=8.0, dropout=0.5), randomize=True)
    plain1, _ = model(TOKENS)
    plain2, _ = model(TOKENS)
    np.testing.assert_array_equal(np.asarray(plain1), np.asarray(plain2))
    d1, _ = set_lora(model, dropout_key=jax.random.key(0))(TOKENS)
    d2, _ = set_lora(model, dropout_key=jax.random.key(1))(TOKENS)
    assert np.abs(np.asarray(d1) - np.asarray(plain1)).max() > 1e-4
    assert np.abs(np.asarray(d1) - np.asarray(d2)).max() > 1e-4
    # each layer draws its own mask: layer keys differ
    keys = jax.random.key_data(model.layers.self_attn.q_proj.dropout_key[...])
    assert not np.array_equal(np.asarray(keys[0]), np.asarray(keys[1]))
    off, _ = set_lora(model, dropout=False)(TOKENS)
    np.testing.assert_array_equal(np.asarray(off), np.asarray(plain1))


@pytest.mark.slow
def test_toggling_adapters_between_calls_of_a_jitted_function(tiny_qwen3_model):
    """The switch is part of the module graph: a function jitted once retraces after a toggle."""
    model = _lora_model(tiny_qwen3_model, randomize=True)
    f = nnx.jit(lambda m, t: m(t)[0])
    on = np.asarray(f(model, TOKENS))
    off = np.asarray(f(set_lora(model, enabled=False), TOKENS))
    again = np.asarray(f(set_lora(model, enabled=True), TOKENS))
    base, _ = tiny_qwen3_model(TOKENS)  # eager: equal up to float rounding of another program
    np.testing.assert_allclose(off, np.asarray(base), atol=1e-5)
    assert np.abs(on - off).max() > 1e-3
    np.testing.assert_array_equal(again, on)
    # the same through split/merge with the graph definition as a static argument
    g = jax.jit(lambda gd, st, t: nnx.merge(gd, st)(t)[0], static_argnums=0)
    on2 = np.asarray(g(*nnx.split(model), TOKENS))
    off2 = np.asarray(g(*nnx.split(set_lora(model, enabled=False)), TOKENS))
    np.testing.assert_array_equal(on2, on)
    np.testing.assert_array_equal(off2, off)


@pytest.mark.slow
def test_adapters_are_stacked_per_layer(tiny_qwen3_model):
    model = _lora_model(tiny_qwen3_model)
    cfg = tiny_qwen3_model.cfg
    q = model.layers.self_attn.q_proj
    assert q.lora_a.get_value().shape == (cfg.num_layers, cfg.hidden_size, 4)
    assert q.lora_b.get_value().shape == (cfg.num_layers, 4, cfg.num_heads, cfg.head_dim)
    assert q.lora_a.get_metadata()["axes"] == ("layers", "embed", "lora_rank")
    # layers get independent initial A
    a = np.asarray(q.lora_a.get_value())
    assert not np.allclose(a[0], a[1])


def test_bad_config_errors():
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        LoRAConfig(targets=("q_proj", "qkv"))
    with pytest.raises(ValueError, match="rank"):
        LoRAConfig(rank=0)


def test_low_rank_backward_equals_autodiff_of_the_plain_product():
    """`low_rank` has its own backward (contractions ordered for XLA:CPU); autodiff of the formula is the reference."""
    rng = np.random.RandomState(0)
    x, a, b = (jnp.asarray(rng.randn(*s), jnp.float32) for s in ((64, 24), (24, 4), (4, 40)))
    g = jnp.asarray(rng.randn(64, 40), jnp.float32)
    out, vjp = jax.vjp(lambda x, a, b: low_rank(x, a, b, 2.0), x, a, b)
    ref_out, ref_vjp = jax.vjp(lambda x, a, b: ((x @ a) @ b) * 2.0, x, a, b)
    np.testing.assert_allclose(out, ref_out, rtol=1e-6, atol=1e-5)
    for got, want in zip(vjp(g), ref_vjp(g)):
        scale = float(jnp.abs(want).max())
        assert float(jnp.abs(got - want).max()) <= 1e-6 * scale + 1e-6


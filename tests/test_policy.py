"""GRPO updates: learning on a verifiable toy reward, clipping with several iterations, exact micro-batch
accumulation, non-finite updates skipped and counted."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rubric_jax import PRESETS, init_model
from rubric_jax.models.lora import LoRAConfig, apply_lora
from rubric_jax.rewards import advantages
from rubric_jax.rl.losses import LossConfig
from rubric_jax.rl.policy import NonFiniteError, Policy, PolicyConfig, RolloutBatch, make_optimizer
from rubric_jax.rl.trainer import rollout_batch
from rubric_jax.sampling import sample

CFG = PRESETS["tiny"].replace(vocab_size=64, eos_token_ids=(63,))
PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]


def _policy(lr=3e-2, loss=LossConfig(aggregation="token_mean"), **pcfg):
    model = init_model(CFG, seed=0)
    # Larger embeddings than the default init so the toy policy is not uniform over the vocabulary.
    model.embed_tokens.embedding.set_value(model.embed_tokens.embedding.get_value() * 8)
    apply_lora(model, LoRAConfig(rank=8, alpha=16.0))
    opt = make_optimizer(lr, warmup_steps=0, total_steps=100, schedule="constant")
    return Policy(model, opt, loss, PolicyConfig(**pcfg))


def _even_share(out):
    cm = out.completion_mask()
    return ((out.tokens % 2 == 0) & cm).sum(1) / np.maximum(cm.sum(1), 1)


def _rollouts(policy, seed, g=8):
    out = sample(policy.model(), PROMPTS, num_samples=g, max_new_tokens=12, temperature=1.0, eos_ids=(63,),
                 pad_id=0, seed=seed)
    r = _even_share(out)
    adv = np.asarray(advantages(jnp.asarray(r.reshape(len(PROMPTS), g)), kind="grpo")).reshape(-1)
    return out, r, adv


def test_policy_trains_only_the_adapters_and_splits_batches_by_rows():
    """On abstract models (nothing compiled): a model without adapters is refused; the adapters are the only
    trainable state; micro-batches are consecutive row slices of every per-row field."""
    opt = make_optimizer(1e-3, warmup_steps=0, total_steps=10)
    with pytest.raises(ValueError, match="apply_lora"):
        Policy(nnx.eval_shape(lambda: init_model(CFG, seed=0)), opt, LossConfig())
    model = nnx.eval_shape(lambda: apply_lora(init_model(CFG, seed=0), LoRAConfig(rank=8, alpha=16.0)))
    policy = Policy(model, opt, LossConfig(), PolicyConfig(micro_batch_size=2))
    names = {p[-1] for p, _ in nnx.to_flat_state(policy.trainable)}
    assert names == {"lora_a", "lora_b"}
    assert not any(p[-1].startswith("lora") for p, _ in nnx.to_flat_state(policy.base))
    n, t = 5, 6
    batch = RolloutBatch(np.arange(n * t).reshape(n, t), np.ones((n, t), bool), 2, np.ones((n, t - 2), bool),
                         np.arange(n, dtype=np.float32), old_logp_bt=np.zeros((n, t - 2)))
    parts = list(policy._micro(batch))
    assert [p.size for p in parts] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([p.tokens_bt for p in parts]), batch.tokens_bt)
    np.testing.assert_array_equal(np.concatenate([p.adv_b for p in parts]), batch.adv_b)
    assert parts[2].ref_logp_bt is None and parts[2].old_logp_bt.shape == (1, t - 2)


@pytest.mark.slow
def test_mean_reward_rises_on_a_verifiable_toy_task():
    """Reward = share of even token ids in the completion; 20 seeded CPU steps."""
    policy = _policy(micro_batch_size=24)
    rewards = []
    for step in range(20):
        out, r, adv = _rollouts(policy, step)
        rewards.append(r.mean())
        policy.update(rollout_batch(out, adv), jax.random.key(step))
    assert rewards[0] < 0.55
    assert np.mean(rewards[-3:]) > 0.9


@pytest.mark.slow
def test_micro_batches_give_the_same_gradient_as_one_batch():
    """Summed numerator gradients over the total denominator equal the full-batch gradient (seq_mean: the
    aggregation most sensitive to getting accumulation wrong)."""
    from rubric_jax.rl.losses import finalize

    grads = []
    for mb in (24, 5):
        policy = _policy(micro_batch_size=mb, loss=LossConfig(aggregation="seq_mean"))
        out, _, adv = _rollouts(policy, 0)
        g, sums, _ = policy.gradients(rollout_batch(out, adv), jax.random.key(0))
        grads.append(([np.asarray(x) / float(sums.den) for x in jax.tree.leaves(g)], float(finalize(sums)[0])))
    (a, la), (b, lb) = grads
    scale = max(np.abs(x).max() for x in a)
    assert scale > 0
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-5 * scale)
    assert la == pytest.approx(lb, abs=1e-7)


@pytest.mark.slow
def test_several_iterations_exercise_the_clip():
    policy = _policy(lr=5e-2, num_iterations=3, micro_batch_size=24)
    out, _, adv = _rollouts(policy, 1)
    metrics = policy.update(rollout_batch(out, adv), jax.random.key(1))
    # After two updates on the same batch the ratio has moved away from 1 and clipping is active.
    assert metrics["ratio"] != pytest.approx(1.0, abs=1e-4)
    assert metrics["clip_frac"] > 0


@pytest.mark.slow
def test_non_finite_updates_are_skipped_then_stop_the_run():
    policy = _policy(max_bad_steps=2, micro_batch_size=24)
    out, _, adv = _rollouts(policy, 2)
    before = [np.asarray(x) for x in jax.tree.leaves(policy.trainable)]
    bad = rollout_batch(out, np.full_like(adv, np.nan))
    m = policy.update(bad, jax.random.key(0))
    assert m["skipped_updates"] == 1 and not np.isfinite(m["loss"])
    for x, y in zip(before, jax.tree.leaves(policy.trainable)):
        np.testing.assert_array_equal(x, np.asarray(y))  # parameters untouched
    with pytest.raises(NonFiniteError, match="2 consecutive"):
        policy.update(bad, jax.random.key(1))


@pytest.mark.slow
def test_reference_logprobs_ignore_adapters():
    policy = _policy(micro_batch_size=24)
    out, _, adv = _rollouts(policy, 3)
    batch = rollout_batch(out, adv)
    ref0 = policy.logprobs(batch, reference=True)
    np.testing.assert_allclose(ref0, policy.logprobs(batch), atol=1e-5)  # fresh adapters: B = 0
    policy.update(batch, jax.random.key(0))
    assert np.abs(policy.logprobs(batch) - ref0).max() > 1e-4
    np.testing.assert_allclose(policy.logprobs(batch, reference=True), ref0, atol=1e-6)


@pytest.mark.slow
def test_the_update_reads_the_log_probs_the_sampler_recorded_with_top_p_on():
    """One forward: with top-k 20, top-p 0.8 and temperature 0.7, the log-probabilities the sampler records for
    its tokens and those the update computes for the same tokens agree in f32 (the mismatch/logp_max metric),
    because both describe the temperature-scaled distribution before truncation. A sampler that recorded the
    truncated, renormalised distribution would be off by far more (checked here, so the test can fail)."""
    from rubric_jax.sampling.filters import filter_logits

    policy = _policy(micro_batch_size=8, temperature=0.7)
    out = sample(policy.model(), PROMPTS, num_samples=8, max_new_tokens=12, temperature=0.7, top_k=20, top_p=0.8,
                 eos_ids=(63,), pad_id=0, seed=3)
    batch = rollout_batch(out, np.linspace(-1, 1, 24).astype(np.float32))
    assert batch.sample_logp_bt.shape == batch.completion_mask_bt.shape
    metrics = policy.update(batch, jax.random.key(0))
    assert 0 <= metrics["mismatch/logp_max"] <= 1e-5, metrics["mismatch/logp_max"]
    # the truncated distribution's log-probs of the same tokens, from a plain forward
    logits, _ = policy.model()(jnp.asarray(batch.tokens_bt), mask_bt=jnp.asarray(batch.mask_bt))
    cols = np.asarray(logits)[:, batch.prompt_len - 1:-1]
    trunc = jax.nn.log_softmax(filter_logits(jnp.asarray(cols.reshape(-1, cols.shape[-1])), temperature=0.7,
                                             top_k=20, top_p=0.8), axis=-1)
    trunc = np.take_along_axis(np.asarray(trunc), batch.tokens_bt[:, batch.prompt_len:].reshape(-1, 1), -1)
    gap = np.abs(trunc.reshape(batch.sample_logp_bt.shape) - batch.sample_logp_bt)[batch.completion_mask_bt]
    assert gap.max() > 1e-2
    # without the sampler's values nothing is claimed
    assert "mismatch/logp_max" not in policy.update(dataclasses.replace(batch, sample_logp_bt=None),
                                                    jax.random.key(1))


def test_max_grad_norm_0_means_no_clipping_as_documented():
    """optim.max_grad_norm=0 ("no clipping") once made optax scale every gradient to 0, so LoRA never moved. Now
    it updates exactly as a clip that never triggers, and unlike a clip that does."""
    import jax
    import jax.numpy as jnp

    params = {"a": jnp.asarray([1.0, -2.0, 0.5]), "b": jnp.asarray([[0.3, 0.1], [-0.4, 2.0]])}
    grads = {"a": jnp.asarray([3.0, -4.0, 1.0]), "b": jnp.asarray([[0.5, -1.5], [2.0, 0.25]])}  # norm ~5.8

    def updates(max_grad_norm):
        opt = make_optimizer(1e-2, warmup_steps=0, total_steps=10, schedule="constant", max_grad_norm=max_grad_norm)
        state, p, out = opt.init(params), params, []
        for k in range(3):  # gradients of growing size: a clip that triggers evens them out, Adam then moves differently
            u, state = opt.update(jax.tree_util.tree_map(lambda g: g * (1 + 2 * k), grads), state, p)
            p = jax.tree_util.tree_map(lambda x, d: x + d, p, u)
            out.append(u)
        return jax.tree_util.tree_leaves(out)

    none, never, tight = updates(0.0), updates(1e9), updates(0.1)
    assert all(np.array_equal(x, y) for x, y in zip(none, never))
    assert all(np.abs(x).max() > 1e-3 for x in none)  # the weights move
    # (Adam is invariant to one scale over all steps, not to scales that differ by step)
    assert not all(np.allclose(x, y) for x, y in zip(none, tight))
    with pytest.raises(ValueError, match="max_grad_norm must be >= 0"):
        make_optimizer(1e-2, warmup_steps=0, total_steps=10, max_grad_norm=-1.0)


@pytest.mark.slow
def test_max_grad_norm_0_trains_metric_for_metric_like_a_clip_that_never_triggers():
    """The same at the level of GRPO updates on the toy policy: three updates with max_grad_norm=0 and with a
    clip at 1e9 (never reached) give the same metrics at every step (loss, grad_norm, entropy, ...) and the
    same adapters, while a clip that triggers (1e-3) does not, and the LoRA B matrices (zero at init) move. The
    two are different compiled programs, so XLA may order a sum differently: the first two steps were
    bit-equal here and the third differed by 1-4 float32 ulps in the metrics and by up to 1.7e-7 in a weight
    (Adam divides by the root of tiny second moments, which magnifies an ulp of gradient), hence rtol 1e-5 on
    the metrics and atol 1e-6 on the weights, a thirty-thousandth of one step's move at lr 3e-2; a clip that
    triggers moves them by far more."""

    def run(max_grad_norm):
        model = init_model(CFG, seed=0)
        model.embed_tokens.embedding.set_value(model.embed_tokens.embedding.get_value() * 8)
        apply_lora(model, LoRAConfig(rank=8, alpha=16.0))
        opt = make_optimizer(3e-2, warmup_steps=0, total_steps=100, schedule="constant", max_grad_norm=max_grad_norm)
        policy = Policy(model, opt, LossConfig(aggregation="token_mean"), PolicyConfig(micro_batch_size=24))
        metrics = []
        for step in range(3):
            out, _, adv = _rollouts(policy, step)
            metrics.append({k: float(v) for k, v in policy.update(rollout_batch(out, adv), jax.random.key(step)).items()})
        return metrics, [(p, np.asarray(x.get_value())) for p, x in nnx.to_flat_state(policy.trainable)]

    def same(a, b):
        (ma, wa), (mb, wb) = a, b
        return ([sorted(m) for m in ma] == [sorted(m) for m in mb]
                # mismatch/*: the sampler's and the update's log-probs apart, float noise by definition (~1e-6)
                and all(np.allclose(x[k], y[k], rtol=1e-5, atol=1e-7) for x, y in zip(ma, mb) for k in x
                        if not k.startswith("mismatch/"))
                and all(np.allclose(x, y, rtol=0, atol=1e-6) for (_, x), (_, y) in zip(wa, wb)))

    none, never, tight = run(0.0), run(1e9), run(1e-3)
    assert same(none, never)
    assert not same(none, tight)
    assert all(m["grad_norm"] > 1e-3 for m in none[0])  # the tight clip did trigger
    assert max(float(np.abs(x).max()) for p, x in none[1] if p[-1] == "lora_b") > 1e-3

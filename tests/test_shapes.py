"""Shapes that do not recompile: the length ladder, completion trimming that leaves the update unchanged, the
persistent compilation cache setting, compile counting, and a 4-step tiny run (20 steps in the heavy tier) that
compiles each jitted program at most 4 times."""

import dataclasses
import functools
import importlib.util
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rubric_jax import PRESETS, init_model
from rubric_jax.models.lora import LoRAConfig, apply_lora
from rubric_jax.rl import shapes
from rubric_jax.rl.losses import LossConfig, finalize
from rubric_jax.rl.metrics import CompileCounter
from rubric_jax.rl.policy import Policy, PolicyConfig, make_optimizer
from rubric_jax.rl.shapes import ShapePlan, fit_rollout_batch, ladder, rung
from rubric_jax.sampling import SampleOutput

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_RUNGS = 4


# ---------------------------------------------------------------------------------------------------------------
# ladder


def test_ladder_values():
    assert ladder(1024) == (256, 512, 768, 1024)
    assert ladder(768) == (192, 384, 576, 768)
    assert ladder(128) == (32, 64, 96, 128)
    assert ladder(100) == (32, 56, 80, 100)  # the top rung is the budget itself, the others multiples of 8
    assert ladder(16) == (8, 16)
    assert ladder(8) == (8,)
    assert ladder(3) == (3,)
    assert ladder(1) == (1,)


def test_ladder_properties():
    for max_len in list(range(1, 300)) + [511, 512, 513, 768, 1000, 1024, 4096, 32768]:
        _check_ladder(max_len)


def _check_ladder(max_len):
    widths = ladder(max_len)
    assert 1 <= len(widths) <= MAX_RUNGS
    assert list(widths) == sorted(set(widths)) and widths[-1] == max_len
    assert all(w % 8 == 0 for w in widths[:-1])
    for n in {0, 1, max_len // 4, max_len // 4 + 1, max_len // 2 + 1, (3 * max_len) // 4 + 1, max_len}:
        w = rung(widths, n)
        assert w >= n and w in widths
        assert not any(n <= v < w for v in widths)  # the smallest that fits
    # A length above a quarter of the budget is padded by at most half its rung (plus the rounding to 8).
    for n in range(max_len // 4 + 1, max_len + 1, max(1, max_len // 37)):
        assert rung(widths, n) - n <= rung(widths, n) / 2 + 8


def test_rung_rejects_a_length_over_the_budget():
    with pytest.raises(ValueError, match="exceeds"):
        rung(ladder(16), 17)
    with pytest.raises(ValueError):
        ladder(0)


def test_shape_plan_prompt_width_is_the_rung_of_the_longest_prompt():
    plan = ShapePlan.build(128, 16, [39, 58, 103])
    assert plan.prompt_ladder == (32, 64, 96, 128) and plan.prompt_width == 128
    assert ShapePlan.build(768, 1024, [39, 103]).prompt_width == 192
    assert ShapePlan.build(768, 1024, []).prompt_width == 768  # nothing known: the budget
    # "max": the top rung whatever the data, so runs on other datasets compile the same programs
    assert ShapePlan.build(768, 1024, [39, 103], width="max").prompt_width == 768
    with pytest.raises(ValueError, match="'longest' or 'max'"):
        ShapePlan.build(768, 1024, [39], width="widest")
    assert [plan.completion_width(n) for n in (0, 1, 8, 9, 16)] == [8, 8, 8, 16, 16]


# ---------------------------------------------------------------------------------------------------------------
# trimming


def _sample_output(lengths, max_new=16, g=2, prompts=((5, 6, 7), (8, 9)), pad_id=0, seed=0):
    rng = np.random.RandomState(seed)
    lengths = np.asarray(lengths, np.int32)
    tokens = rng.randint(1, 60, (len(lengths), max_new)).astype(np.int32)
    tokens[np.arange(max_new)[None, :] >= lengths[:, None]] = pad_id
    tp = 8
    pt = np.full((len(prompts), tp), pad_id, np.int32)
    pm = np.zeros((len(prompts), tp), bool)
    for i, p in enumerate(prompts):
        pt[i, tp - len(p):] = p
        pm[i, tp - len(p):] = True
    zeros = np.zeros((len(lengths), max_new), np.float32)
    return SampleOutput(tokens=tokens, lengths=lengths, logprobs=zeros, entropy=zeros, prompt_tokens=pt,
                        prompt_mask=pm, num_samples=g)


def test_fit_rollout_batch_trims_and_pads():
    out = _sample_output([3, 9, 1, 5])
    adv = np.arange(4, dtype=np.float32)
    full = fit_rollout_batch(out, adv)
    assert full.tokens_bt.shape == (4, 8 + 16) and full.prompt_len == 8
    b = fit_rollout_batch(out, adv, prompt_width=16, completion_width=12)
    assert b.tokens_bt.shape == (4, 16 + 12) and b.prompt_len == 16 and b.completion_mask_bt.shape == (4, 12)
    np.testing.assert_array_equal(b.tokens_bt[:, 8:], full.tokens_bt[:, :8 + 12])
    np.testing.assert_array_equal(b.mask_bt[:, 8:], full.mask_bt[:, :8 + 12])
    assert not b.mask_bt[:, :8].any()
    assert b.mask_bt.sum() == full.mask_bt.sum() and b.completion_mask_bt.sum() == out.lengths.sum()
    wide = fit_rollout_batch(out, adv, completion_width=20, pad_id=0)
    assert wide.tokens_bt.shape == (4, 28) and wide.mask_bt.sum() == full.mask_bt.sum()
    with pytest.raises(ValueError, match="shorter than the longest"):
        fit_rollout_batch(out, adv, completion_width=8)
    with pytest.raises(ValueError, match="cut real prompt"):
        fit_rollout_batch(out, adv, prompt_width=2)


def test_rollout_batch_with_a_plan_trims_to_the_completion_rung():
    from rubric_jax.rl.trainer import rollout_batch

    out = _sample_output([3, 9, 1, 5])
    plan = ShapePlan(prompt_ladder=(8, 16), completion_ladder=(4, 8, 12, 16), prompt_width=8)
    b = rollout_batch(out, np.zeros(4, np.float32), plan)
    assert b.completion_mask_bt.shape[1] == 12 and b.prompt_len == 8
    m = shapes.padding_metrics(out, b)
    assert m["pad/completion_real_frac"] == pytest.approx(18 / (4 * 12))
    assert m["pad/prompt_real_frac"] == pytest.approx(5 / 16)
    assert m["pad/update_real_frac"] == pytest.approx((18 + 2 * 5) / (4 * 20))
    assert (m["shape/prompt_width"], m["shape/completion_width"]) == (8.0, 12.0)


CFG = PRESETS["tiny"].replace(vocab_size=64, eos_token_ids=(63,))
LR = 1e-2
OPT = make_optimizer(LR, warmup_steps=0, total_steps=10, schedule="constant")  # one object: one _apply_jit program


@functools.lru_cache(maxsize=1)
def _lora_model():
    model = init_model(CFG, seed=0)
    apply_lora(model, LoRAConfig(rank=4, alpha=8.0))
    return model


def _policy(loss):
    model = _lora_model()  # shared: a Policy only reads the module, updates replace its own arrays
    # num_iterations=2: the update passes old and reference log-probs, as the gradient check below does, so
    # both run the same compiled program.
    policy = Policy(model, OPT, loss, PolicyConfig(micro_batch_size=4, num_iterations=2))
    # Non-zero B so the adapters change the forward (a zero-initialised B would hide a difference).
    rng = np.random.RandomState(0)
    policy.trainable = jax.tree.map(
        lambda x: jnp.asarray(np.asarray(x) + 0.05 * rng.randn(*x.shape).astype(x.dtype)), policy.trainable)
    return policy


@pytest.mark.slow
def test_trimmed_update_equals_the_untrimmed_one():
    """Trimming the completion columns to the ladder rung (and padding the prompt wider) changes neither the
    log-probs, the loss, its gradient nor the update; dr_grpo keeps dividing by the configured
    max_completion_len (32 here), not the trimmed width (16)."""
    max_new = 32
    loss = LossConfig(aggregation="dr_grpo", max_completion_len=max_new, kl_coef=0.05)
    out = _sample_output([3, 9, 1, 5, 7, 2, 9, 4], max_new=max_new, g=4, prompts=((5, 6, 7), (8, 9)))
    adv = np.array([1.0, -0.5, 0.3, -0.8, 0.2, 0.9, -1.0, 0.1], np.float32)
    full = fit_rollout_batch(out, adv)
    plan = ShapePlan((8, 16), ladder(max_new), prompt_width=16)
    trimmed = fit_rollout_batch(out, adv, prompt_width=plan.prompt_width,
                                completion_width=plan.completion_width(int(out.lengths.max())))
    assert trimmed.tokens_bt.shape == (8, 16 + 16) and full.tokens_bt.shape == (8, 8 + 32)
    results = []
    for batch in (full, trimmed):
        policy = _policy(loss)
        logp, ref = policy.logprobs(batch), policy.logprobs(batch, reference=True)
        perturbed = logp - 0.1 * batch.completion_mask_bt  # old != new: the ratio and its clipping matter
        grads, sums, _ = policy.gradients(dataclasses.replace(batch, old_logp_bt=perturbed, ref_logp_bt=ref),
                                       jax.random.key(0))
        l, m = finalize(sums)
        metrics = policy.update(batch, jax.random.key(1))
        results.append(dict(logp=logp * batch.completion_mask_bt, ref=ref * batch.completion_mask_bt,
                            cmask=batch.completion_mask_bt, loss=float(l), m={k: float(v) for k, v in m.items()},
                            grads=grads, update=metrics, lora=policy.trainable))
    a, b = results
    np.testing.assert_allclose(a["logp"][:, :16], b["logp"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a["ref"][:, :16], b["ref"], rtol=1e-5, atol=1e-5)
    assert not a["logp"][:, 16:].any()
    assert b["m"]["n_tokens"] == out.lengths.sum() and b["m"]["n_seqs"] == 8
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
    for k in a["m"]:
        assert a["m"][k] == pytest.approx(b["m"][k], rel=1e-5, abs=1e-6), k
    for x, y in zip(jax.tree.leaves(a["grads"]), jax.tree.leaves(b["grads"])):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
    for k in a["update"]:
        assert a["update"][k] == pytest.approx(b["update"][k], rel=1e-4, abs=1e-6), k
    # Adam divides by sqrt(v): an element whose gradient is ~0 moves by up to LR on float noise; allow 1% of LR.
    for x, y in zip(jax.tree.leaves(a["lora"]), jax.tree.leaves(b["lora"])):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=0, atol=LR / 100)
    # The other aggregations, on the same log-probs: equal too (seq_mean's per-row means, token_mean's count).
    from rubric_jax.rl.losses import loss_sums

    for agg in ("token_mean", "seq_mean", "dr_grpo"):
        cfg = LossConfig(aggregation=agg, max_completion_len=max_new, kl_coef=0.05)
        la, lb = (finalize(loss_sums(jnp.asarray(r["logp"]), jnp.asarray(r["logp"]) - 0.1, jnp.asarray(r["ref"]),
                                     jnp.asarray(adv), jnp.asarray(r["cmask"]), cfg))[0] for r in (a, b))
        assert float(la) == pytest.approx(float(lb), rel=1e-5, abs=1e-7), agg


# ---------------------------------------------------------------------------------------------------------------
# compilation cache and compile counting


@pytest.fixture
def restore_cache_config():
    keys = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
            "jax_persistent_cache_min_entry_size_bytes")
    saved = {k: getattr(jax.config, k) for k in keys}
    ours = shapes._ours
    yield
    from jax.experimental.compilation_cache import compilation_cache as cc

    for k, v in saved.items():
        jax.config.update(k, v)
    cc.reset_cache()
    shapes._ours = ours


def test_compilation_cache_setting(tmp_path, restore_cache_config, monkeypatch):
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", raising=False)
    jax.config.update("jax_compilation_cache_dir", None)
    shapes._ours = None
    wd = str(tmp_path / "run")
    # '' = <workdir>/jax_cache, for programs of any compile time and size
    assert shapes.configure_compilation_cache("", wd) == os.path.join(wd, "jax_cache")
    assert jax.config.jax_compilation_cache_dir == os.path.join(wd, "jax_cache")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    # Something compiled now lands in it.
    counter = CompileCounter().start()
    try:
        jax.jit(lambda x: jnp.sin(x) * 3.25 + 0.125)(jnp.arange(7.0)).block_until_ready()
    finally:
        counter.stop()
    assert counter.compiles >= 1 and os.listdir(os.path.join(wd, "jax_cache"))
    # A second run in another workdir moves to its own cache (the previous one was ours, not the user's).
    wd2 = str(tmp_path / "run2")
    assert shapes.configure_compilation_cache("", wd2) == os.path.join(wd2, "jax_cache")
    # 'none' disables; an explicit path is used as given.
    assert shapes.configure_compilation_cache("none", wd) is None
    assert jax.config.jax_compilation_cache_dir is None
    assert shapes.configure_compilation_cache(str(tmp_path / "shared"), wd) == str(tmp_path / "shared")
    # A directory the user gave JAX (JAX_COMPILATION_CACHE_DIR / jax.config) wins over the default.
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "users"))
    assert shapes.configure_compilation_cache("", wd) == str(tmp_path / "users")
    assert shapes.configure_compilation_cache("", wd2) == str(tmp_path / "users")
    # A training run sets it for its own duration only.
    jax.config.update("jax_compilation_cache_dir", None)
    shapes._ours = None
    with shapes.compilation_cache("", wd2) as path:
        assert path == jax.config.jax_compilation_cache_dir == os.path.join(wd2, "jax_cache")
    assert jax.config.jax_compilation_cache_dir is None


def test_compile_counter_counts_programs_per_function():
    def shapes_probe(x):
        return jnp.cumsum(x) * 2.5

    f = jax.jit(shapes_probe)
    with CompileCounter() as counter:
        for n in (3, 3, 4, 3, 5):
            f(jnp.ones(n)).block_until_ready()
        first = counter.metrics()
        f(jnp.ones(4)).block_until_ready()
        second = counter.metrics()
    assert counter.by_name["jit(shapes_probe)"] == 3 == f._cache_size()
    assert first["time/compiles"] >= 3 and second["time/compiles"] == 0
    assert set(first) == {"time/compiles", "time/compile_cache_hits", "time/compile_secs"}


# ---------------------------------------------------------------------------------------------------------------
# a 20-step tiny run


def _load_config(name, arg=None):
    spec = importlib.util.spec_from_file_location(f"cfg_{name}", os.path.join(ROOT, "configs", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg)


def jitted_functions() -> dict[str, object]:
    """Every jitted function held at module level in rubric_jax (whatever the modules are called), including
    jitted wrappers of functions from another module (rubric_jax.rewards.compiled), each once."""
    found, seen = {}, set()
    for name, mod in list(sys.modules.items()):
        if not name.startswith("rubric_jax") or mod is None:
            continue
        for attr, v in list(vars(mod).items()):
            if (callable(getattr(v, "_cache_size", None)) and str(getattr(v, "__module__", name)).startswith("rubric_jax")
                    and id(v) not in seen):
                seen.add(id(v))
                found[f"{name}.{attr}"] = v
    return found


def _cut_lengths(real_sample, step_longest):
    """Wraps the sampler so completion lengths cover every rung of the ladder (a tiny model's stories always run
    to the budget): the i-th call cuts every completion at a seeded length <= step_longest[i]."""
    calls = []

    def cut(*args, **kwargs):
        out = real_sample(*args, **kwargs)
        i = len(calls)
        calls.append(i)
        rng = np.random.RandomState(i)
        hi = step_longest[i % len(step_longest)]
        lengths = np.minimum(out.lengths, rng.randint(1, hi + 1, out.lengths.shape))
        lengths[0] = min(hi, out.tokens.shape[1])
        tokens = np.where(np.arange(out.tokens.shape[1])[None, :] < lengths[:, None], out.tokens, kwargs["pad_id"])
        out.tokens, out.lengths = tokens.astype(np.int32), lengths.astype(np.int32)
        return out

    return cut


def _tiny_run(tiny_qwen3, tmp_path, monkeypatch, capsys, steps, step_longest):
    """configs/rcrl.py:tiny for `steps` steps on the tiny random Qwen3 checkpoint, a criterion more every step and
    step i's longest completion cut to step_longest[i]; checks that every jitted function in rubric_jax holds at
    most 4 programs (the judge's too, whatever its functions are called)."""
    from rubric_jax.rl import trainer

    c = _load_config("rcrl", "tiny")
    c.model = tiny_qwen3[0]
    c.steps = steps
    c.max_completion_len = 32  # ladder (8, 16, 24, 32): four completion widths
    c.judge.max_response_tokens = 32
    c.checkpoint.every = steps
    c.tensorboard = False
    monkeypatch.setattr(trainer, "sample", _cut_lengths(trainer.sample, step_longest))
    jax.clear_caches()  # count this run's programs only
    with CompileCounter() as counter:
        hist = trainer.train(c, str(tmp_path))
    assert len(hist) == steps
    per_fn = {k: f._cache_size() for k, f in jitted_functions().items() if f._cache_size()}
    widths = sorted({int(m["shape/completion_width"]) for m in hist})
    with capsys.disabled():
        print("\ncompletion widths:", widths, " prompt width:", {m["shape/prompt_width"] for m in hist})
        print("programs per jitted function:", per_fn)
        print("compile events per name (> 1):", {k: v for k, v in counter.by_name.most_common() if v > 1})
        print("compiles per step:", [int(m["time/compiles"]) for m in hist])
        for k in ("pad/prompt_real_frac", "pad/completion_real_frac", "pad/update_real_frac", "time/judge_real_frac"):
            print(f"{k}: mean {np.mean([m[k] for m in hist]):.3f}")
    assert widths == [8, 16, 24, 32]
    assert all(m["shape/prompt_width"] == hist[0]["shape/prompt_width"] for m in hist)
    # The policy's programs: one sampler program, one optimizer program, one gradient program per width.
    assert per_fn.get("rubric_jax.sampling.sampler._sample_jit") == 1
    assert per_fn.get("rubric_jax.rl.policy._apply_jit") == 1
    assert per_fn.get("rubric_jax.rl.policy._grad_jit") == len(widths)
    over = {k: n for k, n in per_fn.items() if n > MAX_RUNGS}
    assert not over, f"jitted functions compiled more than {MAX_RUNGS} times: {over}"


@pytest.mark.slow
def test_a_4_step_tiny_run_compiles_each_program_at_most_4_times(tiny_qwen3, tmp_path, monkeypatch, capsys):
    """CI's version of the 20-step run below: 4 steps whose longest completions (5, 12, 20, 32 tokens) land on
    the four rungs of the ladder, one width per step, with 1 to 4 active criteria. Over 30 s on 2 cores: four
    gradient programs and four judge shapes are compiled (compiles per step measured: 32, 12, 11, 12); fewer
    steps could not reach all four widths."""
    _tiny_run(tiny_qwen3, tmp_path, monkeypatch, capsys, 4, [5, 12, 20, 32])


@pytest.mark.heavy
@pytest.mark.slow
def test_a_20_step_tiny_run_compiles_each_program_at_most_4_times(tiny_qwen3, tmp_path, monkeypatch, capsys):
    """20 steps (a criterion more every step until all 13 of the rubric are active at step 12, completion lengths
    forced over every rung in mixed order): the judge's shape budget spent and its ceiling shape reused over a
    long curriculum. Heavy: 20 steps of sampling, judging and updating (with the 4-step version, 199 s on 2 busy
    cores after the reward math was compiled once per shape; ~55 compiles a step before); CI runs the 4-step
    version above."""
    _tiny_run(tiny_qwen3, tmp_path, monkeypatch, capsys, 20, [5, 12, 20, 32, 3, 30, 15, 24])

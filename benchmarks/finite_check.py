"""What the check that every updated weight is finite costs in an update (issue 46's constraint: under 1% of a
step). Not a test.

The policy's compiled apply (`rubric_jax.rl.policy._apply`: gradient mean, global norm, AdamW, the new
weights, the selection that keeps the old state on a rejected update) is timed as it is, with the finiteness of
the new weights checked, and with that check removed (the gradient norm's finiteness alone, as before),
on the LoRA adapters of a real model's shapes (default: SmolLM2-135M, r = 16 on every projection, as
configs/learn_ifeval.py trains). Both programs are compiled and warmed first, then timed alternately, --reps
calls each; the median is reported, and the difference set against a training step's seconds (--step_secs,
default 55: a learn_ifeval step on this 2-core CPU) to give its share of a step.

    python benchmarks/finite_check.py --out /tmp/finite_check.json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rubric_jax import PRESETS, init_model
from rubric_jax.models.lora import LoRAConfig, apply_lora
from rubric_jax.rl import policy as pol


@functools.partial(jax.jit, static_argnames=("optimizer",))
def _apply_gnorm_only(optimizer, lora, opt_state, grad_sum, den):
    """`_apply` as it was before the weights were checked: only the gradient norm's finiteness decides."""
    grads = jax.tree.map(lambda g: g / jnp.maximum(den, 1e-8), grad_sum)
    gnorm = optax.tree.norm(grads)
    updates, new_opt = optimizer.update(grads, opt_state, lora)
    new_lora = optax.apply_updates(lora, updates)
    finite = jnp.isfinite(gnorm)
    pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)
    return pick(new_lora, lora), pick(new_opt, opt_state), gnorm, finite


def _adapters(preset: str, rank: int):
    model = nnx.eval_shape(lambda: apply_lora(init_model(PRESETS[preset], seed=0), LoRAConfig(rank=rank, alpha=2.0 * rank)))
    flat = [(p, x) for p, x in nnx.to_flat_state(nnx.state(model)) if p[-1] in ("lora_a", "lora_b")]
    rng = np.random.default_rng(0)
    return {"/".join(map(str, p)): jnp.asarray(rng.normal(0, 0.02, x.get_value().shape).astype(np.float32)) for p, x in flat}


def _time(fn, args, reps):
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append(time.perf_counter() - t)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--step_secs", type=float, default=55.0)
    ap.add_argument("--out", default="")
    a = ap.parse_args()

    lora = _adapters(a.model, a.rank)
    n = sum(int(x.size) for x in jax.tree.leaves(lora))
    opt = pol.make_optimizer(2e-4, warmup_steps=0, total_steps=100, schedule="constant", max_grad_norm=1.0)
    state = opt.init(lora)
    grads = jax.tree.map(lambda x: x * 0.5, lora)
    args = (opt, lora, state, grads, jnp.float32(7.0))
    checked = lambda *z: pol._apply_jit(*z)
    fns = {"new weights checked (now)": checked, "gradient norm only (before)": _apply_gnorm_only}
    for f in fns.values():  # compile and warm
        _time(f, args, 5)
    times = {k: [] for k in fns}
    for _ in range(a.reps // 10):  # alternate, so drift hits both alike
        for k, f in fns.items():
            times[k] += _time(f, args, 10)
    med = {k: float(np.median(v)) for k, v in times.items()}
    extra = med["new weights checked (now)"] - med["gradient norm only (before)"]
    rows = [(k, med[k] * 1e3) for k in fns]
    print(f"apply of {n:,} adapter weights ({a.model}, r={a.rank}), median of {a.reps} calls, {jax.default_backend()}")
    print(f"{'program':32s} {'ms / update':>12s}")
    for k, ms in rows:
        print(f"{k:32s} {ms:12.3f}")
    share = extra / a.step_secs
    print(f"difference {extra * 1e3:+.3f} ms per update = {100 * share:.4f}% of a {a.step_secs:g} s step "
          f"(ratio now / before {med['new weights checked (now)'] / med['gradient norm only (before)']:.3f})")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(model=a.model, rank=a.rank, adapter_weights=n, reps=a.reps, backend=jax.default_backend(),
                           machine=platform.machine(), cpu_count=os.cpu_count(),
                           median_seconds=med, difference_seconds=extra, step_seconds=a.step_secs,
                           share_of_step=share), f, indent=1)


if __name__ == "__main__":
    main()

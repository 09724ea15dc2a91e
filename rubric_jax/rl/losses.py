"""GRPO policy losses: clipped / dual-clipped ratio objective, KL to the reference, aggregation.

Math: docs/method.md (GRPO with LoRA). Shape letters: B batch (sequences), T completion time.

Two switches change the policy term (`policy_loss_terms`), each off by default:
  importance = "token" | "sequence"   per-token ratios (PPO, GRPO) or GSPO's one ratio per sequence
  objective  = "clip" | "cispo"       PPO's clipped surrogate or CISPO's clipped, gradient-stopped weight

Aggregation is expressed as carried sums (`LossSums`: a numerator, a denominator and metric sums) rather than
means, so that micro-batches can be reduced one at a time and combined with `add_sums`:
    finalize(add_sums(loss_sums(mb_1), ..., loss_sums(mb_k))) == finalize(loss_sums(whole batch))
in value, and, because every denominator is a count that does not depend on the parameters, in gradient too.
For gradient accumulation that means: accumulate grad(sums.num) over micro-batches, accumulate sums.den, and
divide once at the end (or compute the denominator up front with `loss_denominator`).

A row of `mask_bt` with no valid token is treated as padding: it adds nothing to any numerator and is not
counted as a sequence (so padded micro-batches of a fixed shape do not change seq_mean or dr_grpo).
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

__all__ = [
    "AGGREGATIONS", "IMPORTANCE", "OBJECTIVES", "LossConfig", "sequence_ratio", "PolicyTerms", "LossSums", "kl_penalty", "policy_loss_terms",
    "loss_denominator", "loss_sums", "add_sums", "finalize", "grpo_loss",
]

AGGREGATIONS = ("token_mean", "seq_mean", "dr_grpo")
IMPORTANCE = ("token", "sequence")
OBJECTIVES = ("clip", "cispo")


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Loss hyper-parameters (all static Python values).

    aggregation: "token_mean" | "seq_mean" | "dr_grpo" (see `loss_sums`).
    eps_low, eps_high: ratio clip range [1 - eps_low, 1 + eps_high] (eps_high > eps_low is "clip-higher").
    dual_clip: c for the dual clip of negative-advantage tokens (RARE uses 3.0), or None to disable.
    kl_coef: weight of the per-token KL term; 0 skips it entirely (no reference log-probs needed).
    kl_kind: "k1" or "k3" estimator.
    max_completion_len: the fixed completion budget L for "dr_grpo" (den = num_seqs * L); required there.
    importance: "token" (one ratio per token) or "sequence" (GSPO: one length-normalised ratio per sequence,
        `sequence_ratio`). GSPO's paper clips the sequence ratio far tighter than PPO clips a token's, since it is a
        geometric mean: eps_low = 3e-4, eps_high = 4e-4 in its experiments (section 5.1).
    objective: "clip" (PPO's clipped surrogate) or "cispo" (CISPO: the clipped ratio as a gradient-stopped
        weight on every token's log-probability, so no token loses its gradient to the clip). MiniMax-M1 clips
        only from above (its eps_low is effectively unbounded); here both eps bound the weight, and the dual
        clip does not apply (the weight never exceeds 1 + eps_high).
    mask_truncated: completions cut at the length cap take no part in the loss (DAPO's overlong filtering);
        applied by the policy update, which knows which completions ended (rubric_jax.rl.policy).

    Any object with these attribute names (an ml_collections.ConfigDict, a dict) is accepted wherever a
    LossConfig is; missing fields take the defaults below.
    """
    aggregation: str = "token_mean"
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip: Optional[float] = 3.0
    kl_coef: float = 0.0
    kl_kind: str = "k3"
    max_completion_len: Optional[int] = None
    importance: str = "token"
    objective: str = "clip"
    mask_truncated: bool = False

    def __post_init__(self):
        if self.importance not in IMPORTANCE:
            raise ValueError(f"unknown importance {self.importance!r}; expected one of {IMPORTANCE}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; expected one of {OBJECTIVES}")


def _as_config(cfg: Any) -> LossConfig:
    if cfg is None:
        return LossConfig()
    if isinstance(cfg, LossConfig):
        return cfg
    get = cfg.get if isinstance(cfg, dict) else (lambda k, d: getattr(cfg, k, d))
    kwargs = {f.name: get(f.name, f.default) for f in dataclasses.fields(LossConfig)}
    return LossConfig(**kwargs)


class PolicyTerms(NamedTuple):
    """Per-token outputs of `policy_loss_terms`, all (B, T); indicators are float32 0/1, unmasked."""
    loss_bt: jax.Array
    ratio_bt: jax.Array
    clipped_low_bt: jax.Array    # A < 0 and rho < 1 - eps_low: the clipped branch is the active one
    clipped_high_bt: jax.Array   # A > 0 and rho > 1 + eps_high: the clipped branch is the active one
    dual_clipped_bt: jax.Array   # A < 0 and the loss was capped at -c * A


class LossSums(NamedTuple):
    """Carried sums for one or more (micro-)batches; a pytree, add with `add_sums`, read with `finalize`.

    num / den is the loss. pg_num is the policy-gradient part of num (same aggregation, no KL).
    The remaining fields are plain sums over valid tokens (or sequences) for metrics.
    """
    num: jax.Array
    den: jax.Array
    pg_num: jax.Array
    n_tokens: jax.Array
    n_seqs: jax.Array
    clipped_low: jax.Array
    clipped_high: jax.Array
    dual_clipped: jax.Array
    ratio_sum: jax.Array
    kl_sum: jax.Array
    entropy_sum: jax.Array


def kl_penalty(logp_bt: jax.Array, ref_logp_bt: jax.Array, kind: str = "k3") -> jax.Array:
    """Per-token estimate of KL(pi_theta || pi_ref) from sampled-token log-probs (docs/method.md).

        k1 = logp - ref_logp
        k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1      (>= 0, lower variance)

    The estimators are Schulman's "Approximating KL divergence" k1/k3; k3 is the one the RARE paper uses.
    """
    logp_bt = logp_bt.astype(jnp.float32) if logp_bt.dtype != jnp.float64 else logp_bt
    ref_logp_bt = jax.lax.stop_gradient(ref_logp_bt).astype(logp_bt.dtype)
    if kind == "k1":
        return logp_bt - ref_logp_bt
    if kind == "k3":
        d = ref_logp_bt - logp_bt
        return jnp.expm1(d) - d
    raise ValueError(f"unknown KL estimator {kind!r}; expected 'k1' or 'k3'")


def sequence_ratio(logp_bt: jax.Array, old_logp_bt: jax.Array, mask_bt: jax.Array) -> jax.Array:
    """GSPO's importance ratio of each sequence, broadcast over its tokens (B, T):

        s_i = exp( (1 / |y_i|) sum_t m_it (logp_it - old_logp_it) )

    the geometric mean of the token ratios ("Group Sequence Policy Optimization", arXiv 2507.18071, eq. 7).
    Its gradient flows to every token of the sequence through the mean; a row with no valid token gets s = 1.
    """
    m = jnp.asarray(mask_bt).astype(logp_bt.dtype)
    n = jnp.maximum(jnp.sum(m, axis=-1, keepdims=True), 1.0)
    mean_log = jnp.sum((logp_bt - jax.lax.stop_gradient(old_logp_bt)) * m, axis=-1, keepdims=True) / n
    return jnp.broadcast_to(jnp.exp(mean_log), logp_bt.shape)


def policy_loss_terms(logp_bt: jax.Array, old_logp_bt: jax.Array, adv_b: jax.Array,
                      eps_low: float = 0.2, eps_high: float = 0.2,
                      dual_clip: Optional[float] = 3.0, *, importance: str = "token", objective: str = "clip",
                      mask_bt: Optional[jax.Array] = None) -> PolicyTerms:
    """Per-token policy loss (docs/method.md).

    importance "token": rho_t = exp(logp_t - old_logp_t); "sequence" (GSPO): rho_t = s_i, the sequence's
    ratio from `sequence_ratio` (needs `mask_bt`), the same for every token of sequence i.

    objective "clip" (PPO, with the dual clip of Ye et al. 2020):
        l_t = -min(rho_t * A, clip(rho_t, 1 - eps_low, 1 + eps_high) * A)
        if A < 0 and dual_clip = c:  l_t = min(l_t, -c * A)     (-c * A > 0 caps the loss of a token whose
                                                               ratio has exploded, rho_t > c)
    With importance "sequence" this is GSPO's objective (arXiv 2507.18071, eq. 5): every token of a sequence
    carries the sequence's clipped term, so a clip drops the whole sequence, never part of it.

    objective "cispo" ("MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
    arXiv 2506.13585, section 3.1, eq. 4):
        w_t = sg(clip(rho_t, 1 - eps_low, 1 + eps_high))
        l_t = -w_t * A * exp(logp_t - sg(logp_t))      value -w_t A,  gradient -w_t A grad logp_t
    the paper's sg(w) A log pi written so the loss reads like the clip objective's (its gradient is the
    paper's): a clipped token still gets its gradient, scaled by the bound. No dual clip (w <= 1 + eps_high).

    `old_logp_bt` and `adv_b` are treated as constants (stop_gradient). `adv_b` is (B,) (one advantage per
    sequence, broadcast over T) or (B, T). The clip indicators count the tokens whose bound is the active one.
    """
    if importance not in IMPORTANCE:
        raise ValueError(f"unknown importance {importance!r}; expected one of {IMPORTANCE}")
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}")
    dtype = jnp.float64 if logp_bt.dtype == jnp.float64 else jnp.float32
    logp_bt = logp_bt.astype(dtype)
    old_logp_bt = jax.lax.stop_gradient(old_logp_bt).astype(dtype)
    adv = jax.lax.stop_gradient(jnp.asarray(adv_b)).astype(dtype)
    adv_bt = adv[:, None] if adv.ndim == 1 else adv
    adv_bt = jnp.broadcast_to(adv_bt, logp_bt.shape)

    if importance == "sequence":
        if mask_bt is None:
            raise ValueError("importance='sequence' (GSPO) averages over each sequence's tokens: pass mask_bt")
        ratio_bt = sequence_ratio(logp_bt, old_logp_bt, mask_bt)
    else:
        ratio_bt = jnp.exp(logp_bt - old_logp_bt)
    clipped_ratio_bt = jnp.clip(ratio_bt, 1.0 - eps_low, 1.0 + eps_high)
    pos, neg = adv_bt > 0, adv_bt < 0
    f = lambda x: x.astype(dtype)
    if objective == "cispo":
        w_bt = jax.lax.stop_gradient(clipped_ratio_bt)
        loss_bt = -w_bt * adv_bt * jnp.exp(logp_bt - jax.lax.stop_gradient(logp_bt))
        low, high = ratio_bt < 1.0 - eps_low, ratio_bt > 1.0 + eps_high
        return PolicyTerms(loss_bt, ratio_bt, f(low & (adv_bt != 0)), f(high & (adv_bt != 0)), f(jnp.zeros_like(neg)))

    unclipped_obj = ratio_bt * adv_bt
    clipped_obj = clipped_ratio_bt * adv_bt
    loss_bt = -jnp.minimum(unclipped_obj, clipped_obj)

    clipped_low = neg & (ratio_bt < 1.0 - eps_low)
    clipped_high = pos & (ratio_bt > 1.0 + eps_high)
    if dual_clip is not None:
        cap_bt = -dual_clip * adv_bt
        dual = neg & (loss_bt > cap_bt)
        loss_bt = jnp.where(neg, jnp.minimum(loss_bt, cap_bt), loss_bt)
    else:
        dual = jnp.zeros_like(neg)
    return PolicyTerms(loss_bt, ratio_bt, f(clipped_low), f(clipped_high), f(dual))


def _check_aggregation(cfg: LossConfig) -> None:
    if cfg.aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {cfg.aggregation!r}; expected one of {AGGREGATIONS}")
    if cfg.aggregation == "dr_grpo" and not cfg.max_completion_len:
        raise ValueError("aggregation 'dr_grpo' needs cfg.max_completion_len (the fixed completion budget)")


def loss_denominator(mask_bt: jax.Array, cfg: Any) -> jax.Array:
    """The `den` that `loss_sums` would return for this mask (it depends on the mask only).

        token_mean: number of valid tokens;  seq_mean: number of non-empty rows;
        dr_grpo:    number of non-empty rows * cfg.max_completion_len
    """
    cfg = _as_config(cfg)
    _check_aggregation(cfg)
    m = jnp.asarray(mask_bt).astype(jnp.float32)
    n_seqs = jnp.sum((jnp.sum(m, axis=-1) > 0).astype(jnp.float32))
    if cfg.aggregation == "token_mean":
        return jnp.sum(m)
    if cfg.aggregation == "seq_mean":
        return n_seqs
    return n_seqs * float(cfg.max_completion_len)


def loss_sums(logp_bt: jax.Array, old_logp_bt: jax.Array, ref_logp_bt: Optional[jax.Array],
              adv_b: jax.Array, mask_bt: jax.Array, cfg: Any,
              entropy_bt: Optional[jax.Array] = None) -> LossSums:
    """Numerator / denominator sums of the GRPO loss for one (micro-)batch.

    Per token: x_t = l_t (see `policy_loss_terms`) + kl_coef * kl_t (see `kl_penalty`; skipped when
    kl_coef == 0, and then `ref_logp_bt` may be None). With m the (B, T) completion mask:
        token_mean: num = sum_{b,t} m x,                    den = sum_{b,t} m
        seq_mean:   num = sum_b (sum_t m x / sum_t m),      den = number of rows with sum_t m > 0
        dr_grpo:    num = sum_{b,t} m x,                    den = number of non-empty rows * max_completion_len
    (docs/method.md; dr_grpo's constant normaliser is from "Understanding R1-Zero-Like Training: A Critical
    Perspective", arXiv 2503.20783.)
    max_completion_len is the configured budget, not this batch's T, so micro-batches agree.

    `entropy_bt` (optional, e.g. from `token_logprobs_chunked`) only feeds the entropy metric and is
    stop_gradient'ed.
    """
    cfg = _as_config(cfg)
    _check_aggregation(cfg)
    terms = policy_loss_terms(logp_bt, old_logp_bt, adv_b, cfg.eps_low, cfg.eps_high, cfg.dual_clip,
                              importance=cfg.importance, objective=cfg.objective, mask_bt=mask_bt)
    dtype = terms.loss_bt.dtype
    m = jnp.asarray(mask_bt).astype(dtype)

    x_bt = terms.loss_bt
    use_kl = cfg.kl_coef != 0
    if use_kl:
        if ref_logp_bt is None:
            raise ValueError("kl_coef != 0 needs ref_logp_bt")
        kl_bt = kl_penalty(logp_bt.astype(dtype), ref_logp_bt, cfg.kl_kind)
        x_bt = x_bt + cfg.kl_coef * kl_bt
        kl_sum = jnp.sum(jax.lax.stop_gradient(kl_bt) * m)
    else:
        kl_sum = jnp.zeros((), dtype)

    tok_per_seq = jnp.sum(m, axis=-1)
    n_tokens = jnp.sum(tok_per_seq)
    n_seqs = jnp.sum((tok_per_seq > 0).astype(dtype))
    if cfg.aggregation == "seq_mean":
        inv = 1.0 / jnp.maximum(tok_per_seq, 1.0)   # empty rows: numerator is 0 anyway
        reduce = lambda v_bt: jnp.sum(jnp.sum(v_bt * m, axis=-1) * inv)
        den = n_seqs
    else:
        reduce = lambda v_bt: jnp.sum(v_bt * m)
        den = n_tokens if cfg.aggregation == "token_mean" else n_seqs * float(cfg.max_completion_len)

    if entropy_bt is None:
        entropy_sum = jnp.zeros((), dtype)
    else:
        entropy_sum = jnp.sum(jax.lax.stop_gradient(entropy_bt).astype(dtype) * m)
    sg = jax.lax.stop_gradient
    return LossSums(
        num=reduce(x_bt),
        den=den,
        pg_num=sg(reduce(terms.loss_bt)),
        n_tokens=n_tokens,
        n_seqs=n_seqs,
        clipped_low=jnp.sum(terms.clipped_low_bt * m),
        clipped_high=jnp.sum(terms.clipped_high_bt * m),
        dual_clipped=jnp.sum(terms.dual_clipped_bt * m),
        ratio_sum=sg(jnp.sum(terms.ratio_bt * m)),
        kl_sum=kl_sum,
        entropy_sum=entropy_sum,
    )


def add_sums(*sums: LossSums) -> LossSums:
    """Elementwise sum of several `LossSums` (micro-batch accumulation)."""
    out = sums[0]
    for s in sums[1:]:
        out = jax.tree.map(jnp.add, out, s)
    return out


def finalize(sums: LossSums) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Loss = num / den (0 when den == 0, i.e. nothing valid) and a dict of scalar metrics.

    Metrics: loss, pg_loss (policy part, same aggregation), kl (token mean), entropy (token mean),
    ratio (token mean), clip_low_frac, clip_high_frac, clip_frac, dual_clip_frac (fractions of valid tokens),
    n_tokens, n_seqs.
    """
    safe = lambda n, d: jnp.where(d > 0, n / jnp.where(d > 0, d, 1.0), 0.0)
    loss = safe(sums.num, sums.den)
    tok = lambda v: safe(v, sums.n_tokens)
    metrics = {
        "loss": jax.lax.stop_gradient(loss),
        "pg_loss": safe(sums.pg_num, sums.den),
        "kl": tok(sums.kl_sum),
        "entropy": tok(sums.entropy_sum),
        "ratio": tok(sums.ratio_sum),
        "clip_low_frac": tok(sums.clipped_low),
        "clip_high_frac": tok(sums.clipped_high),
        "clip_frac": tok(sums.clipped_low + sums.clipped_high),
        "dual_clip_frac": tok(sums.dual_clipped),
        "n_tokens": sums.n_tokens,
        "n_seqs": sums.n_seqs,
    }
    return loss, metrics


def grpo_loss(logp_bt: jax.Array, old_logp_bt: jax.Array, ref_logp_bt: Optional[jax.Array],
              adv_b: jax.Array, mask_bt: jax.Array, cfg: Any,
              entropy_bt: Optional[jax.Array] = None) -> tuple[jax.Array, dict[str, jax.Array]]:
    """One-batch GRPO loss and metrics: finalize(loss_sums(...)). See `loss_sums` for the formulas."""
    return finalize(loss_sums(logp_bt, old_logp_bt, ref_logp_bt, adv_b, mask_bt, cfg, entropy_bt))

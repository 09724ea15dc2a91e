"""Listwise group judging: one judge reading ranks a whole group, read out as pairwise preferences.

Source of the idea: OpenPipe ART's RULER scores all rollouts of a group in one judge call, relative to each
other, instead of one call per pair. Here the judge sees the G responses under the labels A, B, ... and is
asked which one satisfies a criterion best; the verdict is its next-token distribution over the G label
tokens. That distribution is read as a Plackett-Luce first choice: with strengths s_i,

    P(i named first | the presentation) = exp(s_i + b_pos(i)) / sum_j exp(s_j + b_pos(j))

where b_pos is an additive preference of the judge for a position (for a label), whatever sits there.

Conventions (G responses of one prompt, K presentations, C criteria):
  orders_kg[r, pos]         index of the response shown at position pos in presentation r (a permutation).
  label_logits_kg[r, pos]   logit of the label token of position pos in presentation r (trailing axes,
                            e.g. a criterion axis C, are carried through).
  strength_g[i]             mean over presentations of log P(response i named first): s_i + const.
  p_gg[i, j]                P(i above j) = sigmoid(s_i - s_j), the Plackett-Luce (Bradley-Terry) pairwise
                            marginal of the first-choice model; p + p^T = 1 exactly, diagonal 1/2.
  w_g[i]                    1/(G-1) sum_{j != i} p[i, j]: averages exactly 1/2 in a group, so listwise
                            scores plug into the pairwise reward math (`pairwise.pairwise_reward`) unchanged.

Position bias: with orders that form a Latin square (K = G cyclic shifts of one permutation), each
response sits once in every position, so sum_r b_pos_r(i) = sum_pos b_pos is the same for every i and
cancels from every difference s_i - s_j exactly. A single presentation does not cancel it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rubric_jax.rewards.pairwise import symmetrize, win_rates

LISTWISE_MODES = ("logit", "sign", "hard")


def presentation_orders(g: int, k: int | None = None, seed=0) -> np.ndarray:
    """K presentation orders of G responses: an int array (K, G), order[r, pos] = response at position pos.

    All rows are cyclic shifts of one seeded random permutation pi: order[r, pos] = pi[(pos + shift_r) % G].

      k == G (the default) or a multiple of G: shifts 0..G-1 (repeated). Each response sits in every
          position equally often (a Latin square), so an additive position bias cancels exactly in
          `response_logits`.
      k < G: shifts spread evenly, shift_r = floor(r G / k). Response i visits k positions about G/k
          apart; the bias left in s_i is the mean of b over those positions. For a bias monotone in
          position the difference this leaves between two responses is at most about (max b - min b) / k.
      k > G, not a multiple: complete Latin squares for the first G floor(k / G) rows (cancelling as above),
          then the remaining rows with evenly spread shifts (the remainder's bias is left as for k < G,
          diluted by the share of those rows).

    What cyclic shifts never cancel: effects of which response comes next to which (the neighbour of each
    response is the same in every row), e.g. a judge that prefers whatever follows a long response.
    seed: anything np.random.default_rng accepts (an int, or a tuple such as (seed, group_id)).
    """
    g = int(g)
    k = g if k is None else int(k)
    if g < 1 or k < 1:
        raise ValueError(f"presentation_orders: need g >= 1 and k >= 1, got g={g}, k={k}")
    pi = np.random.default_rng(seed).permutation(g)
    full, rest = divmod(k, g)
    shifts = list(range(g)) * full + [(r * g) // rest for r in range(rest)]
    pos = np.arange(g)
    return np.stack([pi[(pos + s) % g] for s in shifts]).astype(np.int32)


def is_latin(orders_kg: np.ndarray) -> bool:
    """True when every response sits in every position equally often (position bias cancels exactly)."""
    o = np.asarray(orders_kg)
    k, g = o.shape
    if k % g:
        return False
    counts = np.zeros((g, g), np.int64)
    np.add.at(counts, (o, np.broadcast_to(np.arange(g), o.shape)), 1)
    return bool(np.all(counts == k // g))


def check_orders(orders_kg, g: int) -> np.ndarray:
    """orders as an int32 array (K, G) whose every row is a permutation of 0..G-1 (else ValueError)."""
    o = np.asarray(orders_kg)
    if o.ndim != 2 or o.shape[1] != g or o.shape[0] < 1:
        raise ValueError(f"orders: expected shape (K >= 1, {g}), got {o.shape}")
    if not np.issubdtype(o.dtype, np.integer):
        raise ValueError(f"orders: expected integers, got {o.dtype}")
    if not np.all(np.sort(o, axis=1) == np.arange(g)):
        raise ValueError("orders: every row must be a permutation of the response indices 0..G-1")
    return o.astype(np.int32)


def _onehot(orders_kg, g: int) -> jnp.ndarray:
    """(K, pos, G) with 1 where presentation r shows response i at position pos."""
    return (jnp.asarray(orders_kg)[..., None] == jnp.arange(g)).astype(jnp.float32)


def position_log_probs(label_logits_kg: jnp.ndarray) -> jnp.ndarray:
    """log P(position pos named first | presentation r) = log_softmax over the G label logits (axis 1).

    Only the label tokens compete: a presentation's overall logit level (how much of the vocabulary's mass
    the labels hold) drops out.
    """
    return jax.nn.log_softmax(jnp.asarray(label_logits_kg, jnp.float32), axis=1)


def to_responses(per_position_kg: jnp.ndarray, orders_kg) -> jnp.ndarray:
    """Re-indexes per-position values (K, G, ...) by response: out[r, i] = x[r, position of i in r]."""
    x = jnp.asarray(per_position_kg)
    oh = _onehot(orders_kg, x.shape[1])
    return jnp.einsum("kp...,kpg->kg...", x, oh.astype(x.dtype))


def response_logits(label_logits_kg: jnp.ndarray, orders_kg, valid_k: jnp.ndarray | None = None) -> jnp.ndarray:
    """Plackett-Luce strengths (G, ...) from K presentations' label logits (K, G, ...) and their orders.

        s_i = sum_r v_r log_softmax(l_r)[pos_r(i)] / sum_r v_r

    with pos_r(i) the position of response i in presentation r and v_r the presentation's weight (valid_k:
    (K,) or (K, ...) matching the trailing axes; 1 = readable, 0 = left out; default all 1). With
    l_r[pos] = q[order_r[pos]] + b[pos] + c_r and Latin-square orders, log_softmax removes c_r and the
    position terms sum to the same sum_pos b for every response: s = q + const exactly. Where no
    presentation is readable, s = 0 for every response (no preference).
    """
    lp = position_log_probs(label_logits_kg)
    k, g = lp.shape[:2]
    v = jnp.ones((k,) + lp.shape[2:], jnp.float32) if valid_k is None else jnp.asarray(valid_k, jnp.float32)
    v = jnp.broadcast_to(v.reshape(v.shape[:1] + (1,) + v.shape[1:]), lp.shape)
    # a left-out presentation may hold non-finite logits: zero them before they meet the weight
    per_resp = to_responses(jnp.where(v > 0, lp, 0.0) * v, orders_kg)
    w = to_responses(v, orders_kg)
    num, den = per_resp.sum(0), w.sum(0)
    return jnp.where(den > 0, num / jnp.maximum(den, 1e-30), 0.0)


def listwise_preferences(strength_g: jnp.ndarray) -> jnp.ndarray:
    """Pairwise probabilities (G, G, ...) from strengths (G, ...):

        P(i above j) = sigmoid(s_i - s_j) = e^{s_i} / (e^{s_i} + e^{s_j})

    the probability that i is named before j when only the two compete (Plackett-Luce / Bradley-Terry).
    Built through `pairwise.symmetrize` from the antisymmetric difference, so p + p^T = 1 bit for bit and
    the diagonal is 1/2.
    """
    s = jnp.asarray(strength_g, jnp.float32)
    d = s[:, None] - s[None, :]
    return symmetrize(jax.nn.sigmoid(d))


def listwise_sign_preferences(strength_g: jnp.ndarray) -> jnp.ndarray:
    """Discrete preferences (the pairwise "sign" mode's analogue): 1 if s_i > s_j, 0 if s_i < s_j, 1/2 on ties.

    The position bias has already been averaged out of s, then the comparison is made discrete, so win rates
    are multiples of 1/(G-1) (a ranking's Borda count rescaled) instead of soft values near 1/2.
    """
    s = jnp.asarray(strength_g, jnp.float32)
    d = s[:, None] - s[None, :]
    return symmetrize(jnp.where(d > 0, 1.0, jnp.where(d < 0, 0.0, 0.5)))


def vote_strengths(label_logits_kg: jnp.ndarray, orders_kg, valid_k: jnp.ndarray | None = None) -> jnp.ndarray:
    """Hard-mode strengths (G, ...): the share of readable presentations whose argmax names response i.

        s_i = sum_r v_r [argmax_pos l_r = pos_r(i)] / sum_r v_r

    Compare with `listwise_sign_preferences`. A judge that always names position 0 gives every response 1/G
    under Latin-square orders: it cannot separate them, as hard-mode pairwise verdicts tie such a judge.
    """
    lg = jnp.asarray(label_logits_kg, jnp.float32)
    k, g = lg.shape[:2]
    top = jax.nn.one_hot(jnp.argmax(lg, axis=1), g, axis=1)  # (K, pos, ...)
    v = jnp.ones((k,) + lg.shape[2:], jnp.float32) if valid_k is None else jnp.asarray(valid_k, jnp.float32)
    v = jnp.broadcast_to(v.reshape(v.shape[:1] + (1,) + v.shape[1:]), lg.shape)
    votes = to_responses(top * v, orders_kg).sum(0)
    den = to_responses(v, orders_kg).sum(0)
    return jnp.where(den > 0, votes / jnp.maximum(den, 1e-30), 1.0 / g)


def listwise_win_rates(strength_g: jnp.ndarray, mode: str = "logit") -> jnp.ndarray:
    """Win rates (G, ...) from strengths (G, ...): w_i = 1/(G-1) sum_{j != i} P(i above j).

    mode "logit": P = sigmoid(s_i - s_j); "sign" and "hard": P = 1, 0, 1/2 by the sign of s_i - s_j (pass
    `vote_strengths` for "hard"). p + p^T = 1 makes mean_i w_i = 1/2 in every group (G = 1: w = 1/2).
    """
    if mode not in LISTWISE_MODES:
        raise ValueError(f"listwise mode: unknown {mode!r}; expected one of {LISTWISE_MODES}")
    p = listwise_preferences(strength_g) if mode == "logit" else listwise_sign_preferences(strength_g)
    return win_rates(p)


def listwise_scores(label_logits_kg: jnp.ndarray, orders_kg, valid_k: jnp.ndarray | None = None,
                    mode: str = "logit") -> tuple[jnp.ndarray, jnp.ndarray]:
    """(win rates, strengths), each (G, ...), from K presentations' label logits: the whole readout."""
    if mode == "hard":
        s = vote_strengths(label_logits_kg, orders_kg, valid_k)
    else:
        s = response_logits(label_logits_kg, orders_kg, valid_k)
    return listwise_win_rates(s, mode), s


def listwise_position_bias(label_logits_kg: jnp.ndarray, valid_k: jnp.ndarray | None = None) -> jnp.ndarray:
    """Mean first-choice probability of each position minus 1/G, over readable presentations: (G,) per
    position (trailing axes averaged). All zeros for a judge with no position preference, whatever the
    responses, when the orders are a Latin square."""
    p = jnp.exp(position_log_probs(label_logits_kg))
    k, g = p.shape[:2]
    v = jnp.ones((k,) + p.shape[2:], jnp.float32) if valid_k is None else jnp.asarray(valid_k, jnp.float32)
    v = jnp.broadcast_to(v.reshape(v.shape[:1] + (1,) + v.shape[1:]), p.shape)
    axes = (0,) + tuple(range(2, p.ndim))
    num = jnp.sum(jnp.where(v > 0, p, 0.0) * v, axis=axes)
    den = jnp.sum(v, axis=axes)
    return jnp.where(den > 0, num / jnp.maximum(den, 1e-30), 1.0 / g) - 1.0 / g


__all__ = ["LISTWISE_MODES", "check_orders", "is_latin", "listwise_preferences", "listwise_scores",
           "listwise_position_bias", "listwise_sign_preferences", "listwise_win_rates", "position_log_probs",
           "presentation_orders", "response_logits", "to_responses", "vote_strengths"]

"""Which pairs of a group's G rollouts the pairwise judge compares.

Every pair (i, j) listed is judged in both presentation orders for every criterion, so a pairing with
P unordered pairs costs 2 P C judgments. Win rates are computed over the judged pairs only
(`rubric_jax.rewards.win_rates` with the returned mask).

  all       G (G - 1) / 2 pairs: the RcRL setting (docs/method.md).
  circular  each rollout meets its k ring neighbours on each side: about G k pairs.
  swiss     ceil(log2 G) rounds; each round pairs rollouts with similar standings that have not met
            yet, so roughly (G / 2) log2 G pairs. Rounds depend on earlier verdicts, so the engine
            judges them one after another (`swiss_round` gives the next round's pairs).
"""

from __future__ import annotations

import math

import numpy as np

from rubric_jax.rewards.pairwise import all_pairs_mask, circular_pairs_mask, mask_from_pairs, pairs_from_mask

PAIRINGS = ("all", "circular", "swiss")


def all_pairs(g: int) -> np.ndarray:
    """(P, 2) int32 unordered pairs i < j, P = G (G - 1) / 2."""
    return pairs_from_mask(all_pairs_mask(g))


def circular_pairs(g: int, k: int = 1) -> np.ndarray:
    """(P, 2) pairs of a ring where each rollout meets k neighbours on each side (P = G k for G > 2k)."""
    return pairs_from_mask(circular_pairs_mask(g, k))


def num_swiss_rounds(g: int) -> int:
    return max(1, math.ceil(math.log2(g))) if g > 1 else 0


def swiss_round(standing_g: np.ndarray, played_gg: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pairs for the next Swiss round: (floor(G/2), 2) int32.

    Rollouts are ranked by standing (e.g. mean win rate so far; ties broken at random); going down
    the ranking, each unpaired rollout meets the best-ranked unpaired one it has not met yet,
    backtracking when that choice would force a later rematch (rematches only when no
    rematch-free pairing exists). With odd G the lowest-ranked rollout that
    has not sat out yet gets a bye; the caller marks past byes on the diagonal of `played_gg`.
    """
    standing = np.asarray(standing_g, dtype=np.float64)
    played = np.asarray(played_gg, dtype=bool)
    g = standing.shape[0]
    order = np.lexsort((rng.random(g), -standing))  # best first, random among equals
    order = list(order)
    if g % 2 == 1:
        # bye: the lowest-ranked rollout that has not had one (diagonal marks previous byes)
        for idx in reversed(range(g)):
            if not played[order[idx], order[idx]]:
                order.pop(idx)
                break
        else:
            order.pop()
    pairs = _pair_fresh(order, played, budget=[20000])
    if pairs is None:  # no rematch-free pairing exists (or the search gave up): allow rematches
        pairs, unpaired = [], list(order)
        while len(unpaired) >= 2:
            i = unpaired[0]
            partner = next((j for j in unpaired[1:] if not played[i, j]), unpaired[1])
            pairs.append((min(i, partner), max(i, partner)))
            unpaired = [x for x in unpaired if x not in (i, partner)]
    return np.asarray(pairs, dtype=np.int32).reshape(-1, 2)


def _pair_fresh(order, played, budget):
    """Backtracking: pairs the ranking top-down, each with the best-ranked opponent it has not met."""
    if not order:
        return []
    budget[0] -= 1
    if budget[0] < 0:
        return None
    i, rest = order[0], order[1:]
    for k, j in enumerate(rest):
        if played[i, j]:
            continue
        tail = _pair_fresh(rest[:k] + rest[k + 1:], played, budget)
        if tail is not None:
            return [(min(i, j), max(i, j))] + tail
    return None


def bye_of(pairs_p2: np.ndarray, g: int) -> int | None:
    """The rollout left out of a round (odd G), or None."""
    seen = set(np.asarray(pairs_p2).reshape(-1).tolist())
    rest = [i for i in range(g) if i not in seen]
    return rest[0] if len(rest) == 1 else None


def pairs_for(pairing: str, g: int, *, k: int = 1) -> np.ndarray:
    """Static pairings ("all", "circular"); Swiss is adaptive and run round by round by the engine."""
    if pairing == "all":
        return all_pairs(g)
    if pairing == "circular":
        return circular_pairs(g, k)
    raise ValueError(f"unknown static pairing {pairing!r}; expected one of {PAIRINGS[:2]} (swiss is adaptive)")


__all__ = ["PAIRINGS", "all_pairs", "circular_pairs", "num_swiss_rounds", "swiss_round", "bye_of",
           "pairs_for", "mask_from_pairs", "pairs_from_mask"]


def pairs_per_group(pairing: str, g: int, k: int = 1) -> int:
    """Unordered pairs the judge compares in a group of g (Swiss: its rounds of floor(g/2) pairs)."""
    if pairing == "swiss":
        return num_swiss_rounds(g) * (g // 2)
    return len(pairs_for(pairing, g, k=k))

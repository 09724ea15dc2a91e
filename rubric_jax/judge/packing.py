"""What the judge engine does besides scoring: packing work into lanes, and randomness that depends only on
each group's or sequence's identity (so a batch split over processes is judged as one call would be).

Swiss pairings of group q draw from np.random.default_rng((seed, group_ids[q])), group_ids being each
prompt's global index; generate mode samples each judged sequence with a key from a hash of its tokens.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np


def first_fit(items, lane: int) -> list[list]:
    """First-fit decreasing packing of (length, payload) items into lanes of `lane` tokens; payload lists."""
    lanes, fill = [], []
    for n, payload in sorted(items, key=lambda e: -e[0]):
        for li in range(len(lanes)):
            if fill[li] + n <= lane:
                lanes[li].append(payload)
                fill[li] += n
                break
        else:
            lanes.append([payload])
            fill.append(n)
    return lanes


def checked_group_ids(group_ids, n: int) -> list[int]:
    if group_ids is None:
        return list(range(n))
    ids = [int(i) for i in group_ids]
    if len(ids) != n:
        raise ValueError(f"group_ids: expected {n} (one per prompt), got {len(ids)}")
    if any(i < 0 for i in ids):
        raise ValueError(f"group_ids must be non-negative, got {ids}")
    return ids


def group_rng(seed, group_id: int) -> np.random.Generator:
    """Group `group_id`'s own generator for `seed` (seed=None: fresh entropy, as np.random.default_rng)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng((int(seed), group_id))


def sequence_keys(seqs: Sequence[Sequence[int]], seed: int = 0) -> jax.Array:
    """One PRNG key per token sequence, from a hash of its tokens: key(seed) folded with two 32-bit words."""
    words = np.zeros((len(seqs), 2), np.uint32)
    for i, s in enumerate(seqs):
        h = hashlib.sha256(np.asarray(s, np.int64).tobytes()).digest()
        words[i] = np.frombuffer(h[:8], np.uint32)
    fold = jax.vmap(lambda w: jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), w[0]), w[1]))
    return fold(jnp.asarray(words))

"""The lengths and counts arrays are padded to: one small set of rules for the sampler, the judge, the shape plan,
the constrained writer and the reward model.

XLA compiles one program per input shape, so every caller pads a length (or a row count) up to the next value on
a coarse ladder: a run then meets a handful of shapes instead of one per length. The ladders differ by caller
(how many shapes each can afford against how much padding it wastes), not the arithmetic, which lives here.
"""

from __future__ import annotations


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= n."""
    return -(-int(n) // multiple) * multiple


def pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def pow2_floor(n: int) -> int:
    """The largest power of two <= n (1 for n <= 1)."""
    return 1 << (max(1, int(n)).bit_length() - 1)


def pow2_then_multiple(n: int, limit: int, multiple: int) -> int:
    """Powers of two up to `limit`, then multiples of `multiple`: fine steps for small sizes, where doubling is
    cheap, and linear ones past `limit`, where it would waste most of a large shape."""
    return pow2(n) if n <= limit else round_up(n, multiple)


def bucket(n: int, steps: int = 4, minimum: int = 16, multiple: int = 8) -> int:
    """The smallest value >= n on the geometric ladder 2^k * (1 + s / steps), s < steps, rounded up to `multiple`
    (at least `minimum`): `steps` shapes per doubling, so padding wastes at most about 1 / steps."""
    n = max(int(n), 1)
    if n <= minimum:
        return minimum
    base = max(pow2_floor(n), minimum)
    for s in range(steps + 1):
        cand = round_up(base + (base * s) // steps, multiple)
        if cand >= n:
            return cand
    return 2 * base

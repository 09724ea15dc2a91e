"""The padding ladders (rubric_jax.padding), on values worked out by hand."""

from rubric_jax.padding import bucket, pow2, pow2_floor, pow2_then_multiple, round_up


def test_powers_of_two_and_multiples():
    assert [pow2(n) for n in (0, 1, 2, 3, 5, 8, 9)] == [1, 1, 2, 4, 8, 8, 16]
    assert [pow2_floor(n) for n in (0, 1, 2, 3, 5, 8, 9)] == [1, 1, 2, 2, 4, 8, 8]
    assert [round_up(n, 8) for n in (0, 1, 8, 9, 17)] == [0, 8, 8, 16, 24]


def test_powers_of_two_then_linear_steps():
    # the sampler's prompt widths: 16, 32, ... 512, then steps of 256
    assert [pow2_then_multiple(max(n, 16), 512, 256) for n in (3, 17, 300, 512, 513, 800)] == [16, 32, 512, 512,
                                                                                                 768, 1024]
    # the constrained writer's rows: 1, 2, 4, 8, then steps of 8
    assert [pow2_then_multiple(n, 8, 8) for n in (1, 3, 8, 9, 17)] == [1, 4, 8, 16, 24]


def test_geometric_ladder_four_steps_a_doubling():
    # 16 | 16, 20, 24, 28, 32 -> multiples of 8: 16, 24, 24, 32, 32 | 32, 40, 48, 56, 64 | ...
    assert [bucket(n) for n in (1, 16, 17, 24, 25, 33, 41, 49, 57, 65)] == [16, 16, 24, 24, 32, 40, 48, 56, 64, 80]
    assert bucket(100, steps=1, minimum=1, multiple=1) == 128  # one step a doubling: powers of two

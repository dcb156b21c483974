"""absmax / 127 without a divide, proven equal to IEEE fp32 division for every bf16 absmax (CPU).

The int8 write's scale is max(absmax / 127, 1e-6), and absmax is the magnitude of a bf16 value:
one of 32,640 non-negative finite numbers. store_floor.py's fastdiv arm computes it as
q = a * fp32(1/127), then q + fma(-q, 127, a) * fp32(1/127), each step rounded once (mul_rn,
fma_rn). This checks that against correctly rounded division for every one of those values,
with exact rational arithmetic; without the correction step (the control) some differ. Since
session 29 the shipped write's _int8_row_scale computes it this way; int8_unit_test.py checks that
function against div_rn on the GPU at every non-negative fp32.

    python benchmarks/int8_variants/store_divide.py
"""

from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np

INV_127 = np.float32(1) / np.float32(127)  # store_floor.py's fastdiv uses this constant


def bf16_magnitudes() -> np.ndarray:
    """Every non-negative finite bf16 value, as fp32 (bf16 is fp32's top 16 bits)."""
    return (np.arange(0, 0x7F80, dtype=np.uint32) << 16).view(np.float32)


def round_to_f32(value: Fraction) -> np.float32:
    """value rounded once to the nearest fp32, ties to even (a float64 step first can land on a
    midpoint, so the neighbours are compared exactly)."""
    guess = np.float32(float(value))
    near = (np.nextafter(guess, np.float32(-np.inf)), guess, np.nextafter(guess, np.float32(np.inf)))
    return min(near, key=lambda c: (abs(Fraction(float(c)) - value), int(np.array(c).view(np.uint32)) & 1))


def fma_rn(x: np.float32, y: np.float32, z: np.float32) -> np.float32:
    return round_to_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))


def div127(a: np.float32, *, correct: bool = True) -> np.float32:
    q = np.float32(a * INV_127)  # fp32 * fp32 in numpy rounds once, as mul_rn
    return fma_rn(fma_rn(-q, np.float32(127), a), INV_127, q) if correct else q


def mismatches(*, correct: bool = True) -> int:
    values = bf16_magnitudes()
    reference = values / np.float32(127)  # IEEE fp32 division, correctly rounded
    return sum(div127(a, correct=correct) != r for a, r in zip(values, reference, strict=True))


def main() -> None:
    bad = mismatches()
    print(f"{bf16_magnitudes().size} bf16 magnitudes: {bad} differ from IEEE a / 127"
          f" (without the FMA correction: {mismatches(correct=False)})")  # fmt: skip
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

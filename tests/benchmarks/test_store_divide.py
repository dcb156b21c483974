"""The int8 write's divide-free absmax / 127 (store_floor.py's fastdiv) equals IEEE division for
every bf16 absmax, and the check fails without its FMA correction."""

from __future__ import annotations

import sys

from builder.constants import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "int8_variants"))
import store_divide  # noqa: E402


def test_every_bf16_magnitude_divides_exactly():
    assert store_divide.bf16_magnitudes().size == 32640
    assert store_divide.mismatches() == 0


def test_the_product_alone_is_caught():
    assert store_divide.mismatches(correct=False) > 1000

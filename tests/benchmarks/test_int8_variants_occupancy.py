"""benchmarks/int8_variants/occupancy.py on CPU: its variants parse, and what the int8 kernel is
launched with under a variant is the wrapper's launch with exactly the variant's options changed."""

from __future__ import annotations

import sys

import pytest

from builder.constants import REPO_ROOT

from tests.benchmarks.conftest import load_script

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def occupancy():
    sys.path[:0] = [str(REPO_ROOT / "benchmarks"), str(REPO_ROOT / "bundle" / "patches")]
    return load_script("benchmarks/int8_variants/occupancy.py", "occupancy_bench")


def test_variant_names_say_stages_and_register_cap(occupancy):
    assert occupancy.parse_variant("s1r168") == {"num_stages": 1, "maxnreg": 168}
    assert occupancy.parse_variant("r200") == {"maxnreg": 200}
    assert occupancy.parse_variant("s1") == {"num_stages": 1}
    for wrong in ("", "x1", "r", "s12"):
        with pytest.raises(SystemExit, match="is not s<stages>"):
            occupancy.parse_variant(wrong)


def test_a_variant_changes_only_its_launch_options_and_is_undone(occupancy, patched_tree):
    """The Triton launch is the boundary (no GPU here): record what the wrapper sends through it,
    shipped and under the variant."""
    from builder.patches import aot
    from qsa_cases import int8_kv_cache
    from qsa_loader import load_ops_module

    ops = aot._loader().load_qsa_ops(patched_tree, capability=(9, 0))
    layout = load_ops_module("qsa_kv_layout")
    _, key, value, ks, vs = int8_kv_cache(layout, 8, 16, 2, device="cpu")
    q = torch.zeros(4, 24, 256, dtype=torch.bfloat16)
    sent: list[dict] = []

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                sent.append(kwargs)
                raise RuntimeError("no GPU on this machine")
            return launch

    def call():
        with pytest.raises(RuntimeError, match="no GPU"):
            ops.qsa_sparse_paged_attention(
                q, key, value, torch.zeros(4, 33, dtype=torch.int32), torch.zeros(1, 8, dtype=torch.int32),
                torch.zeros(4, dtype=torch.int32), True, output_gate=torch.zeros_like(q), k_scale_cache=ks, v_scale_cache=vs,
            )  # fmt: skip

    shipped = getattr(ops, occupancy.KERNEL)
    setattr(ops, occupancy.KERNEL, Recorder())
    try:
        call()
        with occupancy.launch_options(ops, {"num_stages": 1, "maxnreg": 168}):
            call()
        assert isinstance(getattr(ops, occupancy.KERNEL), Recorder)  # put back on exit
    finally:
        setattr(ops, occupancy.KERNEL, shipped)
    plain, variant = sent
    assert plain["num_stages"] == 2 and "maxnreg" not in plain
    assert variant == {**plain, "num_stages": 1, "maxnreg": 168}

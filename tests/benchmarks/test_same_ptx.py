"""benchmarks/int8_variants/same_ptx.py on CPU: a comment-only edit compiles to the same PTX, dropping
the partials' eviction hint does not (the control that shows the comparison can fail)."""

from __future__ import annotations

import shutil

import pytest

from builder.constants import REPO_ROOT

from tests.benchmarks.conftest import load_script

pytest.importorskip("triton")

OPS = "vllm/models/qwen4_exp/nvidia/ops/qsa.py"
HINT = '            mask=output_mask,\n            eviction_policy="evict_last",\n'


@pytest.fixture(scope="module")
def same_ptx():
    return load_script("benchmarks/int8_variants/same_ptx.py", "same_ptx")


def _edited_copy(patched_tree, tmp_path, old: str, new: str):
    tree = tmp_path / "tree"
    shutil.copytree(patched_tree / "vllm/models/qwen4_exp/nvidia/ops", tree / "vllm/models/qwen4_exp/nvidia/ops")
    source = (tree / OPS).read_text()
    assert source.count(old) == 1
    (tree / OPS).write_text(source.replace(old, new))
    return tree


def test_comment_only_edit_compiles_to_the_same_ptx_and_a_dropped_hint_does_not(same_ptx, patched_tree, tmp_path):
    # The first two production configs in sorted order: one split (no partials), then two.
    shipped = same_ptx.ptx_digests(patched_tree, limit=2)
    assert [k[3] for k in shipped] == [1, 2]
    commented = _edited_copy(patched_tree, tmp_path / "c", HINT, HINT + "            # a comment the compiler drops\n")
    assert same_ptx.ptx_digests(commented, limit=2) == shipped
    unhinted = _edited_copy(patched_tree, tmp_path / "u", HINT, "            mask=output_mask,\n")
    changed = same_ptx.ptx_digests(unhinted, limit=2)
    assert [changed[k] == shipped[k] for k in shipped] == [True, False]

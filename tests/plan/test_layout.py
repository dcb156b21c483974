"""The int8 page layout the planner uses is the code the patch series adds, not a copy of it."""

from __future__ import annotations

import shutil

import pytest

from builder.constants import ENGINE_QSA_DIR, PATCHES_DIR
from builder.errors import PatchError
from builder.plan.layout import LAYOUT_RELPATH, layout_source, load_layout


def _patches_copy(tmp_path, edit):
    """A copy of the series with one text edit applied to qsa-int8.diff."""
    dst = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, dst)
    diff = dst / "qsa-int8.diff"
    text = diff.read_text()
    edited = edit(text)
    assert edited != text, "the edit must change the diff"
    diff.write_text(edited)
    return dst


def test_layout_pages_count_the_fp32_scale_tail():
    layout = load_layout()
    assert layout.int8_page_size_bytes(1, 1, 256) == 520  # TP2: one kv head, 512 B of K/V rows + 2 x 4 B scales
    assert layout.int8_page_size_bytes(1, 2, 256) == 1040
    assert layout.int8_scale_bytes_per_block(144, 2) == 2 * 144 * 2 * 4


def test_layout_source_is_the_patched_engine_file(patched_tree):
    """Byte for byte what `builder patches apply` puts into the engine."""
    assert layout_source() == (patched_tree / ENGINE_QSA_DIR / "ops" / "qsa_kv_layout.py").read_text()


def test_editing_the_patch_changes_the_plan(tmp_path):
    """One source of truth: change the scale size in the diff and the planner's pages follow."""
    patches = _patches_copy(tmp_path, lambda t: t.replace("+SCALE_BYTES = 4 ", "+SCALE_BYTES = 2 "))
    edited = load_layout(patches)
    assert edited.int8_page_size_bytes(1, 1, 256) == 516
    assert load_layout().int8_page_size_bytes(1, 1, 256) == 520  # the shipped series is untouched


def test_a_hunk_that_does_not_add_up_is_a_patch_error(tmp_path):
    patches = _patches_copy(tmp_path, lambda t: t.replace("+KV_ROW_ALIGN_BYTES = 128\n", "", 1))
    with pytest.raises(PatchError, match=r"qsa_kv_layout.py says (\d+) lines but has (?!\1)\d+"):
        layout_source(patches)


def test_a_series_without_the_layout_file_is_a_patch_error(tmp_path):
    dst = tmp_path / "patches"
    dst.mkdir()
    (dst / "series").write_text("")
    with pytest.raises(PatchError, match=f"create {LAYOUT_RELPATH}"):
        layout_source(dst)

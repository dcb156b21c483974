"""CPU: the torch references the GPU tests trust, and the patched layout helpers (lint, scale carving)."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

torch = pytest.importorskip("torch")

from builder.constants import ENGINE_QSA_DIR as QSA_DIR  # noqa: E402


@pytest.fixture(scope="module")
def layout(patched_tree):
    """The patched engine's own qsa_kv_layout.py (torch-free lint + carving)."""
    path = patched_tree / QSA_DIR / "ops" / "qsa_kv_layout.py"
    spec = importlib.util.spec_from_file_location("qsa_kv_layout_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_round_half_away_is_exact():
    from qsa_reference import round_half_away

    x = torch.tensor([0.5, -0.5, 1.5, -2.5, 0.49999997, -0.49999997, 2.4999998, 126.5, -127.5, 0.0])
    expected = torch.tensor([1.0, -1.0, 2.0, -3.0, 0.0, -0.0, 2.0, 127.0, -128.0, 0.0])
    assert torch.equal(round_half_away(x), expected)
    # trunc(x + 0.5) gets 0.49999997 wrong: the reason for the exact form.
    assert torch.trunc(torch.tensor(0.49999997) + 0.5) == 1.0


def test_quantize_int8_convention():
    from qsa_reference import quantize_int8_per_row

    rows = torch.zeros(4, 8)
    rows[0, :4] = torch.tensor([127.0, 2.5, -3.5, -0.5])  # scale exactly 1: ties
    rows[1] = 1e-9  # below the floor: scale 1e-6, values clamp
    rows[2, 0] = -254.0  # scale 2: -127
    q, scale = quantize_int8_per_row(rows)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32
    assert q[0, :4].tolist() == [127, 3, -4, -1]
    assert scale[1] == torch.tensor(1e-6) and q[1].tolist() == [0] * 8
    assert scale[2] == 2.0 and q[2, 0] == -127
    assert scale[3] == torch.tensor(1e-6) and q[3].abs().sum() == 0
    x = torch.randn(64, 256) * 3
    q, scale = quantize_int8_per_row(x)
    err = (q.float() * scale[:, None] - x).abs().max(dim=1).values
    assert torch.all(err <= scale * 0.5 + 1e-6)
    assert torch.all(q.abs().amax(dim=1) == 127)


def _brute_force(q, k, v, idx, table, t2r, gate):
    rows, hq, d = q.shape
    blocks, page, nkv, _ = k.shape
    group, width = hq // nkv, idx.shape[1] - 1
    out = torch.zeros(rows, hq, d)
    for r in range(rows):
        req = int(t2r[r])
        for h in range(hq):
            keys, vals = [], []
            for j in range(min(int(idx[r, width]), width)):
                t = int(idx[r, j])
                if t < 0 or not 0 <= req < table.shape[0] or t // page >= table.shape[1]:
                    continue
                phys = int(table[req, t // page])
                if 0 <= phys < blocks:
                    keys.append(k[phys, t % page, h // group])
                    vals.append(v[phys, t % page, h // group])
            if keys:
                p = torch.softmax(torch.stack(keys) @ q[r, h].float() * d**-0.5, dim=0)
                out[r, h] = (p[:, None] * torch.stack(vals)).sum(0) * torch.sigmoid(gate[r, h].float())
    return out


def test_sparse_attention_reference_matches_brute_force():
    from qsa_reference import qsa_sparse_attention_reference

    gen = torch.Generator().manual_seed(0)
    blocks, page, nkv, hq, d, width, rows = 6, 4, 2, 4, 8, 10, 7
    k, v = torch.randn(blocks, page, nkv, d, generator=gen), torch.randn(blocks, page, nkv, d, generator=gen)
    q, gate = torch.randn(rows, hq, d, generator=gen), torch.randn(rows, hq, d, generator=gen)
    table = torch.tensor([[3, 1, 7], [0, -1, 5]], dtype=torch.int32)  # 7: physical page out of range
    idx = torch.randint(0, 12, (rows, width + 1), generator=gen, dtype=torch.int32)
    idx[:, width] = width
    idx[0, width] = 0  # empty row
    idx[1, 3:] = -1  # -1 holes
    idx[2, width] = 4  # count below the width
    idx[3, :2] = 40  # logical page beyond the table
    t2r = torch.tensor([0, 1, 0, 1, 0, 5, -1], dtype=torch.int32)  # 5, -1: no such request
    ref = qsa_sparse_attention_reference(q, k, v, idx, table, t2r, gate, chunk_rows=3)
    assert torch.allclose(ref, _brute_force(q, k, v, idx, table, t2r, gate), atol=1e-5)
    assert ref[0].abs().sum() == 0 and ref[5].abs().sum() == 0 and ref[6].abs().sum() == 0


def test_page_size_counts_side_scales(layout):
    assert layout.int8_scale_bytes_per_block(64, 2) == 2 * 64 * 2 * 4
    assert layout.int8_page_size_bytes(64, 2, 256) == 64 * 2 * 512 + 1024
    # 260-byte rows would put the same bytes inline; the side layout keeps 512 per slot.
    assert layout.int8_page_size_bytes(16, 1, 256) % 128 == 0


@pytest.mark.parametrize(
    "row_bytes,offset,ok",
    [(256, 0, True), (384, 0, True), (512, 0, True), (260, 0, False), (256, 64, False)],
)
def test_alignment_lint_on_numbers(layout, row_bytes, offset, ok):
    problems = layout.kv_row_alignment_problems(
        element_size=1, storage_offset=offset, block_stride=64 * 2 * row_bytes * 2,
        token_stride=2 * row_bytes, head_stride=64 * 2 * row_bytes, row_elements=256,
    )  # fmt: skip
    assert (problems == []) == ok, problems


def _int8_cache(layout, blocks, heads, page, row_bytes=256, tail=True):
    slot = 2 * row_bytes
    page_bytes = heads * page * slot + (layout.int8_scale_bytes_per_block(page, heads) if tail else 0)
    raw = torch.zeros(blocks * page_bytes, dtype=torch.int8)
    return raw, raw.as_strided((blocks, heads, page, slot), (page_bytes, page * slot, slot, 1))


def test_lint_refuses_or_warns_on_tensor_views(layout):
    _, good = _int8_cache(layout, 3, 2, 16)
    assert layout.check_kv_row_alignment(good.transpose(1, 2)[..., :256], name="K") == []
    _, inline = _int8_cache(layout, 3, 2, 16, row_bytes=260)
    key = inline.transpose(1, 2)[..., :256]
    with pytest.raises(ValueError, match="token stride is 520 B"):
        layout.check_kv_row_alignment(key, name="K")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problems = layout.check_kv_row_alignment(key, name="K", mode="warn")
    assert problems and "128-byte" in str(caught[0].message)
    with pytest.raises(ValueError, match="mode must be"):
        layout.check_kv_row_alignment(key, name="K", mode="ignore")


def test_carved_scales_are_paired_in_the_page_tail(layout):
    """Each (token, head)'s K and V scale sit side by side in the tail, one aligned 8-byte pair
    (a gather reads both from one sector); a K tail then a V tail fails the index checks."""
    blocks, heads, page = 3, 2, 16
    raw, cache = _int8_cache(layout, blocks, heads, page)
    k_scales, v_scales = layout.carve_int8_scale_caches(cache, head_dim=256)
    assert k_scales.shape == v_scales.shape == (blocks, page, heads)
    assert k_scales.dtype == torch.float32 and k_scales.stride() == v_scales.stride()
    k_scales[1, 5, 1] = 2.0
    v_scales[1, 5, 1] = 3.0
    v_scales[2, 0, 0] = 4.0
    floats = torch.empty(0, dtype=torch.float32).set_(raw.untyped_storage())
    page_floats = cache.stride(0) // 4
    data_floats = heads * page * 512 // 4
    pair = 1 * page_floats + data_floats + 2 * (5 * heads + 1)
    assert floats[pair] == 2.0 and floats[pair + 1] == 3.0 and pair % 2 == 0
    assert floats[2 * page_floats + data_floats + 1] == 4.0
    assert floats.count_nonzero() == 3
    assert cache.abs().sum() == 0  # no scale landed in K/V data
    _, no_tail = _int8_cache(layout, blocks, heads, page, tail=False)
    with pytest.raises(ValueError, match="no room"):
        layout.carve_int8_scale_caches(no_tail, head_dim=256)

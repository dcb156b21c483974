"""CPU: the patched QSA ops' host-side checks, run on the real patched ops/qsa.py (no GPU)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")


@pytest.fixture(scope="module")
def ops(patched_tree):
    from builder.patches.ops_loader import load_qsa_ops

    return load_qsa_ops(patched_tree, capability=(9, 0))


def _call(ops, *, head_dim: int, scale_heads: int = 2):
    """One int8 call on CPU tensors: 24 query heads over 2 kv heads, scales for scale_heads."""
    rows, q_heads, kv_heads, page, blocks, width = 4, 24, 2, 16, 8, 32
    q = torch.zeros(rows, q_heads, head_dim, dtype=torch.bfloat16)
    cache = torch.zeros(blocks, page, kv_heads, head_dim, dtype=torch.int8)
    scales = torch.ones(blocks, page, scale_heads)
    return ops.qsa_sparse_paged_attention(
        q, cache, cache, torch.zeros(rows, width + 1, dtype=torch.int32), torch.zeros(1, blocks, dtype=torch.int32),
        torch.zeros(rows, dtype=torch.int32), True, output_gate=torch.zeros_like(q),
        k_scale_cache=scales, v_scale_cache=scales,
    )  # fmt: skip


def test_int8_cache_with_head_dim_below_64_is_refused_with_the_reason(ops):
    with pytest.raises(ValueError, match=r"head_dim >= 64, got 32"):
        _call(ops, head_dim=32)


def test_int8_scale_tensors_of_the_wrong_shape_are_refused(ops):
    with pytest.raises(ValueError, match=r"fp32 k_scale_cache and v_scale_cache shaped \(8, 16, 2\)"):
        _call(ops, head_dim=256, scale_heads=1)


def test_int8_table_entries_cover_every_arch_table_and_restore_the_dispatch(ops):
    from qsa_cases import int8_entries_and_one_split, int8_table_entries

    saved = ops._is_sm90, ops._is_sm120
    entries = int8_table_entries(ops)
    assert (ops._is_sm90, ops._is_sm120) == saved
    # Each table entry at its widest width (an entry keyed on a width launches at most the splits
    # that width has tiles for); and nothing else but those tiles with fewer splits, which an open
    # entry launches at another entry's width limit.
    own = {(bn, warps, min(splits, -(-(width or 1 << 24) // bn))) for _, width, (bn, splits, warps) in ops._SM90_INT8_TABLE}
    sm90 = {e for e, archs in entries.items() if "sm_90" in archs}
    assert own <= sm90
    assert all(any((bn, warps) == e[:2] and e[2] <= splits for _, _, (bn, splits, warps) in ops._SM90_INT8_TABLE) for e in sm90)
    # sm_120's int8 branch and the default table (sm_80, sm_121) are in too.
    assert {(32, 1, 2), (32, 4, 4), (64, 8, 64)} <= {e for e, archs in entries.items() if "sm_120" in archs}
    assert {(32, 4, 64), (64, 2, 1)} <= {e for e, archs in entries.items() if "sm_80/sm_121" in archs}
    with_one = int8_entries_and_one_split(ops)
    for block_n, warps, _ in entries:
        assert "one split" in with_one[(block_n, warps, 1)]
    assert all(archs.count("one split") <= 1 for archs in with_one.values())


def test_forced_int8_config_forces_then_restores(ops):
    from qsa_cases import forced_int8_config

    select = ops._select_config
    with forced_int8_config(ops, 64, 2, 8):
        assert ops._select_config(4096, 2, True, 2051, False, True) == (64, 2, 33, 8)
        assert ops._select_config(4096, 2, True, 200, False, True) == (64, 2, 4, 4)  # never more splits than tiles
    assert ops._select_config is select


def test_causal_windows():
    from qsa_cases import causal_windows

    out = causal_windows(torch.tensor([0, 3, 10]), 4)
    assert out.tolist() == [[0, -1, -1, -1, 1], [0, 1, 2, 3, 4], [7, 8, 9, 10, 4]]


def test_store_launch_is_within_5_percent_of_the_best_the_h200_sweep_measured(ops):
    """The quantize-on-write launch shape per write size comes from an H200 sweep of every launch
    shape at every write size (fixtures/qsa-int8-store-sweep-h200.json, see its README): the shipped
    launch is at worst 1.05x the best there; the old fixed 4 tokens x 4 warps, the control, is over
    15% slower than the best at its worst size."""
    import json
    from pathlib import Path

    sweep = json.loads((Path(__file__).parent / "fixtures/qsa-int8-store-sweep-h200.json").read_text())

    def worst(launch) -> float:
        return max(row["us"]["T{}/w{}".format(*launch(row["tokens"], row["kv_heads"]))] / row["us"][row["best"]]
                   for row in sweep["rows"])

    assert worst(ops._store_int8_launch) <= 1.05
    assert worst(lambda tokens, heads: (4, 4)) > 1.15


def test_both_scale_layouts_sit_in_the_page_tail_and_pass_the_host_checks(ops):
    """The shipped paired tail and the split one (all K scales, then all V) cover the same tail
    bytes; the wrapper takes either."""
    from qsa_cases import int8_kv_cache
    from builder.patches.ops_loader import load_ops_module

    layout = load_ops_module("qsa_kv_layout")
    blocks, page, heads = 8, 16, 2
    data_end = heads * page * 2 * 256  # bytes of K/V rows at each page's start
    tail = layout.int8_scale_bytes_per_block(page, heads)
    for split in (False, True):
        kv_cache, key, value, ks, vs = int8_kv_cache(layout, blocks, page, heads, device="cpu", split_scales=split)
        assert ks.shape == vs.shape == (blocks, page, heads) and ks.stride() == vs.stride()
        offsets = set()
        for b, t, h in itertools.product(range(blocks), range(page), range(heads)):
            k_at, v_at = (4 * (s.storage_offset() + b * s.stride(0) + t * s.stride(1) + h * s.stride(2)) for s in (ks, vs))
            assert (v_at == k_at + 4) != split  # paired: one aligned 8-byte pair
            offsets |= {k_at - b * kv_cache.stride(0), v_at - b * kv_cache.stride(0)}
        assert offsets == set(range(data_end, data_end + tail, 4))
        _check_host_accepts(ops, key, value, ks, vs, blocks)


def test_only_the_paired_tail_takes_the_one_load_scale_path(ops, monkeypatch):
    """PAIRED_SCALES (one 8-byte load per token's scale pair) for the engine's carve; the split
    tail, and K and V scales that are one tensor, take the two-load path."""
    from qsa_cases import int8_kv_cache
    from builder.patches.ops_loader import load_ops_module

    class Launched(Exception):
        pass

    seen = []

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                seen.append(kwargs["PAIRED_SCALES"])
                raise Launched

            return launch

    monkeypatch.setattr(ops, "_qsa_sparse_paged_int8_splitk_kernel", Recorder())
    layout = load_ops_module("qsa_kv_layout")
    blocks = 8
    cases = []
    for split in (False, True):
        _, key, value, ks, vs = int8_kv_cache(layout, blocks, 16, 2, device="cpu", split_scales=split)
        cases.append((key, value, ks, vs))
    key, value, ks, _ = cases[0]
    cases.append((key, value, ks, ks))  # the paired strides, but V's scales are K's
    # V one element after K, but with odd strides: the 8-byte pairs would be misaligned.
    base = torch.zeros(blocks * 33 + 1)
    odd = torch.as_strided(base, (blocks, 16, 2), (33, 2, 1)), torch.as_strided(base, (blocks, 16, 2), (33, 2, 1), 1)
    cases.append((key, value, *odd))
    for key, value, ks, vs in cases:
        with pytest.raises(Launched):
            _int8_call(ops, key, value, ks, vs, blocks)
    assert seen == [True, False, False, False]


def _int8_call(ops, key, value, ks, vs, blocks):
    """One int8 call of 4 rows x 24 query heads, width 32, over the given cache and scale views."""
    q = torch.zeros(4, 24, 256, dtype=torch.bfloat16)
    return ops.qsa_sparse_paged_attention(
        q, key, value, torch.zeros(4, 33, dtype=torch.int32), torch.zeros(1, blocks, dtype=torch.int32),
        torch.zeros(4, dtype=torch.int32), True, output_gate=torch.zeros_like(q), k_scale_cache=ks, v_scale_cache=vs,
    )  # fmt: skip


def _check_host_accepts(ops, key, value, ks, vs, blocks):
    try:
        _int8_call(ops, key, value, ks, vs, blocks)
    except ValueError as exc:  # the wrapper's own refusals; the kernel launch itself needs a GPU
        pytest.fail(f"the host checks refused the scale layout: {exc}")
    except RuntimeError:
        pass


def test_the_sm90_int8_dispatch_keys_on_the_selection_width(ops, monkeypatch):
    """An entry with a width limit is taken only up to that width; past it the bucket's open entry."""
    monkeypatch.setattr(ops, "_is_sm90", lambda: True)
    monkeypatch.setattr(ops, "_is_sm120", lambda: False)
    monkeypatch.setattr(ops, "_SM90_INT8_TABLE", ((24, 2048, (128, 32, 4)), (24, None, (64, 64, 2)), (None, None, (64, 1, 2))))
    picks = {w: ops._select_config(5, 2, False, w, False, True) for w in (1024, 2048, 2051, 4099)}
    assert picks == {1024: (128, 4, 8, 8), 2048: (128, 4, 16, 16), 2051: (64, 2, 33, 33), 4099: (64, 2, 65, 64)}
    assert ops._select_config(13, 2, False, 1024, False, True)[:2] == (64, 2)  # bp 26: the next bucket
    assert ops._select_config(5, 2, False, 1024, True, False) != picks[1024]  # fp8 keeps its own table


def _record_launches(ops, monkeypatch):
    """Replace the attention and merge kernels by recorders; returns the list they append to."""
    launches = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append((self.name, grid, args, kwargs))

            return launch

    for name in ("_qsa_sparse_paged_gqa_splitk_kernel", "_qsa_sparse_paged_int8_splitk_kernel", "_qsa_merge_splitk_kernel"):
        monkeypatch.setattr(ops, name, Recorder(name))
    monkeypatch.setattr(ops, "_select_config", lambda *args: (64, 2, 33, 8))
    return launches


def _comparable(arg):
    """What a Triton kernel sees of an argument: a tensor's pointer and dtype (its strides are
    separate arguments), else the value."""
    if isinstance(arg, torch.Tensor):
        return ("tensor", arg.data_ptr(), arg.dtype)
    return arg


def test_the_int8_path_launches_the_bf16_paths_contract_argument_for_argument(ops, monkeypatch):
    """The int8 path reads each tensor's metadata once (host cost) instead of going through the
    general wrapper. Whatever the bf16 path passes the split-K and merge kernels for the same Q,
    indices, table, output and gate, the int8 path must pass too, except the caches and their
    scales: strided Q (a view of a fused projection), a 2-D gate, K and V caches of different
    strides, a caller's output buffer."""
    from qsa_cases import int8_kv_cache
    from builder.patches.ops_loader import load_ops_module

    launches = _record_launches(ops, monkeypatch)
    rows, q_heads, kv_heads, dim, page, blocks, width = 5, 24, 2, 256, 16, 8, 40
    fused = torch.zeros(rows, q_heads * dim * 2 + 64, dtype=torch.bfloat16)
    q = fused[:, : q_heads * dim].view(rows, q_heads, dim)
    gate = torch.zeros(rows, q_heads * dim, dtype=torch.bfloat16)
    out = torch.zeros(rows, q_heads, dim + 64, dtype=torch.bfloat16)[:, :, :dim]  # padded heads
    indices = torch.zeros(rows, width + 1, dtype=torch.int32)
    table = torch.zeros(3, blocks + 5, dtype=torch.int32)
    t2r = torch.zeros(rows, dtype=torch.int32)
    layout = load_ops_module("qsa_kv_layout")
    _, int8_key, _, ks, vs = int8_kv_cache(layout, blocks, page, kv_heads, device="cpu")
    int8_value = torch.zeros(blocks, kv_heads, page, dim, dtype=torch.int8).transpose(1, 2)
    # bf16 caches with the int8 caches' strides: the kernels see strides, not bytes.
    bf16_key, bf16_value = (
        torch.as_strided(torch.zeros(c.untyped_storage().nbytes(), dtype=torch.bfloat16), c.shape, c.stride(), c.storage_offset())
        for c in (int8_key, int8_value)
    )  # fmt: skip
    common = dict(output_gate=gate)
    ops.qsa_sparse_paged_attention(q, bf16_key, bf16_value, indices, table, t2r, False, out, **common)
    ops.qsa_sparse_paged_attention(
        q, int8_key, int8_value, indices, table, t2r, False, out, k_scale_cache=ks, v_scale_cache=vs, **common
    )  # fmt: skip
    (bf16_name, bf16_grid, bf16_args, bf16_kw), bf16_merge, (int8_name, int8_grid, int8_args, int8_kw), int8_merge = launches
    assert (bf16_name, int8_name) == ("_qsa_sparse_paged_gqa_splitk_kernel", "_qsa_sparse_paged_int8_splitk_kernel")
    assert int8_grid == bf16_grid == (rows, kv_heads, 8)
    shared = len(bf16_args)
    assert len(int8_args) == shared + 5  # the two scale tensors and their three strides
    caches_and_scales = {1, 2, 9, 10}  # k_cache, v_cache, softmax_scale, output_scale
    partials = {6, 7}  # allocated per call: same dtype, shape and strides, not the same pointer
    for i in range(shared):
        if i in partials:  # the kernels index them as contiguous [splits, rows, heads(, dim)]
            assert int8_args[i].is_contiguous() and int8_args[i].dtype == bf16_args[i].dtype == torch.float32
            assert int8_args[i].shape == bf16_args[i].shape
        elif i not in caches_and_scales:
            assert _comparable(int8_args[i]) == _comparable(bf16_args[i]), f"argument {i}"
    assert [_comparable(a) for a in int8_args[1:3]] == [_comparable(int8_key), _comparable(int8_value)]
    assert int8_args[9:11] == (dim**-0.5, 1 / 128)
    assert [_comparable(a) for a in int8_args[shared:shared + 2]] == [_comparable(ks), _comparable(vs)]
    assert tuple(int8_args[shared + 2:]) == ks.stride()
    assert {k: v for k, v in int8_kw.items() if k != "PAIRED_SCALES"} == bf16_kw and int8_kw["PAIRED_SCALES"] is True
    assert bf16_merge[0] == int8_merge[0] == "_qsa_merge_splitk_kernel"
    assert int8_merge[1] == bf16_merge[1] and int8_merge[3] == bf16_merge[3]
    assert [_comparable(a) for a in int8_merge[2][2:]] == [_comparable(a) for a in bf16_merge[2][2:]]
    assert [a.data_ptr() for a in int8_merge[2][:2]] == [a.data_ptr() for a in int8_args[6:8]]


def test_the_int8_path_refuses_what_the_general_path_refuses(ops, monkeypatch):
    """Every shape refusal of the bf16/fp8 path holds for int8 too, with the same message."""
    _record_launches(ops, monkeypatch)
    rows, q_heads, dim, page, blocks, width = 4, 24, 256, 16, 8, 32

    def call(dtype, *, q_shape=(rows, q_heads, dim), cache_heads=2, indices=(rows, width + 1), t2r=(rows,), table=(1, blocks)):
        q = torch.zeros(q_shape, dtype=torch.bfloat16)
        cache = torch.zeros(blocks, page, cache_heads, dim, dtype=dtype)
        scales = torch.ones(blocks, page, cache_heads)
        extra = dict(k_scale_cache=scales, v_scale_cache=scales) if dtype == torch.int8 else {}
        return ops.qsa_sparse_paged_attention(
            q, cache, cache, torch.zeros(indices, dtype=torch.int32), torch.zeros(table, dtype=torch.int32),
            torch.zeros(t2r, dtype=torch.int32), True, output_gate=torch.zeros(q_shape, dtype=torch.bfloat16), **extra,
        )  # fmt: skip

    bad = {
        "q of two dims": dict(q_shape=(rows, q_heads * dim)),
        "indices rows": dict(indices=(rows + 1, width + 1)),
        "token_to_req": dict(t2r=(rows + 1,)),
        "empty table": dict(table=(1, 0)),
        "count column only": dict(indices=(rows, 1)),
        "heads not grouped": dict(cache_heads=5),
    }
    for case, kwargs in bad.items():
        messages = []
        for dtype in (torch.bfloat16, torch.int8):
            with pytest.raises(ValueError) as err:
                call(dtype, **kwargs)
            messages.append(str(err.value))
        assert messages[0] == messages[1], case


@pytest.mark.parametrize("wrong", ["k_scale_cache", "v_scale_cache"])
@pytest.mark.parametrize("how", ["shape", "dtype", "strides", "missing"])
def test_either_int8_scale_tensor_alone_is_checked(ops, wrong, how):
    rows, q_heads, page, blocks = 4, 24, 16, 8
    q = torch.zeros(rows, q_heads, 256, dtype=torch.bfloat16)
    cache = torch.zeros(blocks, page, 2, 256, dtype=torch.int8)
    good = torch.ones(blocks, page, 2)
    bad = {
        "shape": torch.ones(blocks, page, 2)[:, :, :1],  # the good strides, one head short
        "dtype": torch.ones(blocks, page, 2, dtype=torch.float16),
        "strides": torch.ones(blocks, 2, page).transpose(1, 2),
        "missing": None,
    }[how]
    scales = {"k_scale_cache": good, "v_scale_cache": good, wrong: bad}
    with pytest.raises(ValueError, match=r"fp32 k_scale_cache and v_scale_cache shaped \(8, 16, 2\)"):
        ops.qsa_sparse_paged_attention(
            q, cache, cache, torch.zeros(rows, 33, dtype=torch.int32), torch.zeros(1, blocks, dtype=torch.int32),
            torch.zeros(rows, dtype=torch.int32), True, output_gate=torch.zeros_like(q), **scales,
        )  # fmt: skip

"""GPU tests of the memory-mapped PLE lookups, on the real patched ``common/ple_mmap.py``.

    QFN_PLE_PATCHED_TREE=<tree with the series applied> python -m pytest -q tests/gpu/test_ple_mmap.py

Tables are real files: safetensors checkpoints (shards in safetensors' name order, with an
odd-sized tensor between them, so rows sit at several byte alignments) mapped in place by
``scan_checkpoint`` + ``map_checkpoint_table``, and a table file written by ``TableFileBuilder``.
Every lookup is compared byte for byte with the rows as written. Skips cleanly without a GPU;
the H200 run is recorded in evidence/ple/.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest
from ple_loader import load_ple_mmap, load_upstream_pinned_kernel

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs an NVIDIA GPU", allow_module_level=True)

TREE = Path(os.environ.get("QFN_PLE_PATCHED_TREE", ""))
ROW_BYTES = 256  # a bf16 row of head_dim 128
KEY = "layers.0.ple.ple_embedding.ngram_embedding"


@pytest.fixture(scope="module")
def ple():
    if not (TREE / "vllm/models/qwen4_exp/common/ple_mmap.py").is_file():
        pytest.fail("set QFN_PLE_PATCHED_TREE to a vllm 0.33.0 tree with bundle/patches/series applied")
    return load_ple_mmap(TREE)


def _write_checkpoint(folder: Path, rows: int, shard_rows: int, seed: int) -> np.ndarray:
    """A checkpoint of ``rows`` bf16 rows in shards; returns the rows as uint8 [rows, ROW_BYTES]."""
    from safetensors.torch import save_file

    table = np.random.default_rng(seed).integers(0, 256, size=(rows, ROW_BYTES), dtype=np.uint8)
    tensors = {}
    for shard, start in enumerate(range(0, rows, shard_rows)):
        rows_here = table[start : start + shard_rows]
        tensors[f"model.language_model.{KEY}.shard_{shard}.weight"] = torch.from_numpy(rows_here.copy()).view(torch.bfloat16)
    # Same dtype, so safetensors stores it between shard_12 and shard_13 (name order), shifting
    # the shards after it (13-15, 2-9) off the alignment of those before it (0, 1, 10-12).
    tensors[f"model.language_model.{KEY}.shard_12.weight_odd"] = torch.zeros(3, dtype=torch.bfloat16)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    return table


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    rows, shard_rows = 200_000, 12_500  # 16 shards, 51 MB
    return folder, _write_checkpoint(folder, rows, shard_rows, seed=3), shard_rows


def _spec(ple):
    return ple.TableSpec("weight", torch.bfloat16, ROW_BYTES // 2)


def _in_place(ple, checkpoint, start: int, end: int):
    folder, table, _ = checkpoint
    found, _ = ple.scan_checkpoint(
        ple.checkpoint_files(folder), key=KEY, specs=[_spec(ple)], org_vocab_size=table.shape[0]
    )
    mapped = ple.map_checkpoint_table(found["weight"], vocab_start=start, vocab_end=end, key=KEY)
    assert len(mapped._views) > 1, "the odd tensor should put shards at two byte alignments"
    return mapped


def _table_file(ple, checkpoint, tmp_path, start: int, end: int):
    _, table, _ = checkpoint
    builder = ple.TableFileBuilder(
        path=tmp_path / "t.pletable", digest="d" * 64, key=KEY, specs=[_spec(ple)], vocab_start=start, vocab_end=end
    )
    middle = (start + end) // 2  # two chunks, written out of order
    builder.write(0, middle, table[middle:end])
    builder.write(0, start, table[start:middle])
    meta = builder.commit()
    return ple.map_table_file(tmp_path / "t.pletable", meta, [_spec(ple)], vocab_start=start, vocab_end=end)[0]


def _expected(table: np.ndarray, ids: np.ndarray, start: int, end: int) -> np.ndarray:
    owned = (ids >= start) & (ids < end)
    return np.where(owned[:, None], table[np.where(owned, ids, 0)], 0)


def _ids(rows: int, count: int, seed: int, start: int, end: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    edges = [0, rows - 1, start, end - 1, min(end, rows - 1), max(start - 1, 0)]
    return np.concatenate([np.array(edges), rng.integers(0, rows, size=count - len(edges))]).astype(np.int64)


def test_h200_has_no_pageable_access_and_auto_picks_gather(ple):
    device = torch.device("cuda", 0)
    pageable, host_tables = ple.pageable_memory_access(device)
    if pageable:
        pytest.skip("this GPU reads pageable memory (GB10-like): the direct path applies")
    assert ple.choose_lookup_path("auto", device) == "gather"
    assert ple.choose_lookup_path("gather", device) == "gather"
    with pytest.raises(ValueError, match="cudaDevAttrPageableMemoryAccess=0"):
        ple.choose_lookup_path("direct", device)


@pytest.mark.parametrize("storage", ["in-place", "table-file"])
@pytest.mark.parametrize(("start", "end"), [(0, 200_000), (93_750, 200_000)])  # TP1; TP2's rank 1 (mid-shard start)
@pytest.mark.parametrize("count", [320, 16_384, 70_000])  # 70,000 rows: more than one staging chunk
def test_gather_matches_the_written_rows(ple, checkpoint, tmp_path, storage, start, end, count):
    _, table, _ = checkpoint
    mapped = _in_place(ple, checkpoint, start, end) if storage == "in-place" else _table_file(ple, checkpoint, tmp_path, start, end)
    gather = ple.HostGather([mapped], max_rows=count, device=torch.device("cuda", 0))
    ids = _ids(table.shape[0], count, seed=count + start, start=start, end=end)
    out = torch.full((count, ROW_BYTES), 7, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        ids_device = torch.from_numpy(ids).cuda(non_blocking=False)
        gather.launch(ids_device, [out])
    stream.synchronize()
    assert np.array_equal(out.cpu().numpy(), _expected(table, ids, start, end))


def test_gather_replays_in_a_cuda_graph(ple, checkpoint):
    """Captured once (memcpy and host nodes), replayed on new ids written into the same buffer."""
    _, table, _ = checkpoint
    mapped = _in_place(ple, checkpoint, 0, table.shape[0])
    count = 320
    gather = ple.HostGather([mapped], max_rows=count, device=torch.device("cuda", 0))
    static_ids = torch.zeros(count, dtype=torch.int64, device="cuda")
    out = torch.zeros((count, ROW_BYTES), dtype=torch.uint8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture):
        gather.launch(static_ids, [out])  # eager warm-up, as vLLM's profile run does
        with torch.cuda.graph(graph, stream=capture):
            gather.launch(static_ids, [out])
    torch.cuda.synchronize()
    for seed in (1, 2, 3):
        ids = _ids(table.shape[0], count, seed, 0, table.shape[0])
        static_ids.copy_(torch.from_numpy(ids))
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert np.array_equal(out.cpu().numpy(), table[ids])


def test_upstream_pinned_kernel_returns_the_same_rows(ple, checkpoint):
    _, table, _ = checkpoint
    start, end = 93_750, 200_000
    kernel = load_upstream_pinned_kernel(TREE)
    pinned = torch.from_numpy(table[start:end].copy()).pin_memory()
    ids = _ids(table.shape[0], 4096, 9, start, end)
    ids_device = torch.from_numpy(ids).cuda()
    out = torch.empty((len(ids), ROW_BYTES), dtype=torch.uint8, device="cuda")
    kernel[(len(ids),)](pinned, ids_device, out, ROW_BYTES, start, end, BLOCK_D=ROW_BYTES)
    torch.cuda.synchronize()
    assert np.array_equal(out.cpu().numpy(), _expected(table, ids, start, end))


def test_direct_kernel_reads_a_registered_mapping(ple, checkpoint):
    """The direct kernel's addressing, on this GPU: the mapping's pages are registered (so the GPU
    may read them at their host addresses), which stands in for pageable access. GB10 reads the
    same addresses without registration."""
    _, table, _ = checkpoint
    start, end = 93_750, 200_000
    mapped = _in_place(ple, checkpoint, start, end)
    libcuda = ctypes.CDLL("libcuda.so.1")
    maps = {id(s.filemap): s.filemap for s in mapped.segments if s is not None}
    registered = []
    try:
        for filemap in maps.values():
            # CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY
            result = libcuda.cuMemHostRegister_v2(ctypes.c_void_p(filemap.address), ctypes.c_size_t(len(filemap)), 0x01 | 0x08)
            if result != 0:
                pytest.skip(f"cuMemHostRegister of a file mapping failed here (CUDA error {result})")
            registered.append(filemap)
        ids = _ids(table.shape[0], 4096, 11, start, end)
        ids_device = torch.from_numpy(ids).cuda()
        out = torch.empty((len(ids), ROW_BYTES), dtype=torch.uint8, device="cuda")
        ple.lookup_rows_direct(mapped, ids_device, out)
        torch.cuda.synchronize()
        assert np.array_equal(out.cpu().numpy(), _expected(table, ids, start, end))
    finally:
        for filemap in registered:
            libcuda.cuMemHostUnregister(ctypes.c_void_p(filemap.address))

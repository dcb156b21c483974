"""Runs inside a container with the PATCHED vllm 0.33.0 tree on PYTHONPATH (CPU torch).

    python3 probe.py PLAN.json     (the plan is made by benchmarks/ple/cpu_proof.py)

A plan is a list of steps, run in order; each prints one JSON line:

  write     a synthetic Qwen4Exp PLE checkpoint (safetensors, streamed shard by shard, so the
            writer needs little memory); the table layout (prime-sized n-gram heads, padded
            vocabulary, checkpoint shards) comes from the engine's Qwen4ExpNGramEmbedding.
  load      each TP rank (a forked process; gloo) builds a real Qwen4ExpNGramEmbedding under a
            real VllmConfig/EngramConfig, loads it with vLLM's safetensors_weights_iterator, the
            layer's load_weights and vLLM's process_weights_after_loading, then looks up ids
            (first/last rows, both sides of every rank and shard boundary, random ids) and
            compares every byte with the rows the safetensors library reads from the files.
            Reports load time, peak RSS, the cgroup's OOM kills, and the lookup result.
  damage    flips a byte in, or truncates, the table files in a directory.
  uncache   fsyncs a checkpoint's files and drops them from the page cache: later loads read
            them cold, and the pages they fault in are charged to this container.

Engine modules are imported once, before the ranks fork, so a step costs no import time and
the ranks share those pages (the container's memory limit counts them once).
Nothing here stands in for the code under test; see _register_inspect_only_architecture for
the one thing ModelConfig needs that a CPU-only machine cannot import.
"""

from __future__ import annotations

import json
import math
import os
import resource
import struct
import sys
import time
import zlib
from pathlib import Path

LAYER_ID = 1  # 1-based decoder layer id that carries the PLE table
PREFIX = "model.layers.0.ple.ple_embedding"  # the vLLM module prefix of that layer's n-gram embedding
CKPT_PREFIX = "model.language_model.layers.0.ple.ple_embedding"  # as the checkpoint spells it

# dtype code -> (numpy dtype for generation, bit mask that keeps values finite)
_GEN = {
    "BF16": ("<u2", 0xBFFF),  # exponent MSB clear: |x| < 2, never inf/NaN
    "F16": ("<u2", 0xBFFF),
    "F32": ("<u4", 0xBFFFFFFF),
    "F8_E4M3": ("u1", 0xBF),
    "U8": ("u1", 0xFF),
}
_ELEMENT = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}


def model_config(
    *, base: int, split: int, method: str, embed_dim: int, heads_per_ngram: int, ple_layers: list[int] | None = None
) -> dict:
    config = {
        "architectures": ["Qwen4ExpForCausalLM"],
        "model_type": "qwen4_exp_text",
        "vocab_size": 1024,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "eos_token_id": 2,
        "ngram_size": 3,
        "heads_per_ngram": heads_per_ngram,
        "ple_embed_dim": embed_dim,
        "ngram_vocab_size_base": base,
        "make_ngram_vocab_size_divisible_by": 128,
        "split_ngram_parts": split,
        "ple_layer_ids": [LAYER_ID],
        "torch_dtype": "bfloat16",
    }
    if ple_layers is not None:
        config["ple_layer_ids"] = ple_layers
    if method != "unquantized":
        config["ple_embedding_dtype"] = {"fp8": "float8_e4m3fn", "nvfp4": "nvfp4"}[method]
    return config


def table_geometry(config: dict) -> tuple[int, int]:
    """(rows of the padded table, rows per checkpoint shard) as the engine computes them."""
    from vllm.models.qwen4_exp.nvidia.ngram_embedding import Qwen4ExpNGramEmbedding
    from vllm.utils.math_utils import round_up

    heads = (config["ngram_size"] - 1) * config["heads_per_ngram"]
    _, _, total = Qwen4ExpNGramEmbedding._make_vocab_layout(
        ngram_vocab_size_base=config["ngram_vocab_size_base"], ngram_heads=heads, ple_dense_layer_id=0
    )
    rows = round_up(total, config["make_ngram_vocab_size_divisible_by"])
    return rows, -(-rows // config["split_ngram_parts"])


def _tensors(config: dict, dtype: str, method: str) -> list[tuple[str, str, list[int]]]:
    """(name, dtype code, shape) of every tensor, plus an odd-sized one that shifts the byte
    alignment of later shards (real files mix tensors; the mapping must cope)."""
    rows, shard_rows = table_geometry(config)
    heads = (config["ngram_size"] - 1) * config["heads_per_ngram"]
    width = config["ple_embed_dim"] // heads
    out = []
    for shard in range(config["split_ngram_parts"]):
        count = max(0, min(shard_rows, rows - shard * shard_rows))
        base = f"{CKPT_PREFIX}.ngram_embedding.shard_{shard}"
        if method == "nvfp4":
            out.append((f"{base}.weight", "U8", [count, width // 2]))
            out.append((f"{base}.weight_scale", "F8_E4M3", [count, width // 16]))
        else:
            out.append((f"{base}.weight", dtype, [count, width]))
    out.append((f"{CKPT_PREFIX}.ngram_embedding.shard_2.weight_extra", "F16", [3]))
    if method in ("fp8", "nvfp4"):
        scale = "weight_scale" if method == "fp8" else "weight_scale_2"
        out.append((f"{CKPT_PREFIX}.ngram_embedding.{scale}", "F32", []))
    return out


def _fill(name: str, dtype: str, shape: list[int], seed: int):
    import numpy as np

    count = int(np.prod(shape)) if shape else 1
    if name.endswith(("weight_scale", "weight_scale_2")) and dtype == "F32":
        return np.array([0.5] * count, dtype="<f4")
    gen, mask = _GEN[dtype]
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    values = rng.integers(0, np.iinfo(gen).max, size=count, dtype=gen, endpoint=True)
    return values & np.array(mask, dtype=gen)


def write_checkpoint(out: Path, *, config: dict, dtype: str, method: str, files: int, seed: int) -> dict:
    """Stream a safetensors checkpoint into ``out`` (``files`` shards + an index)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    tensors = _tensors(config, dtype, method)
    # Files hold tensors in safetensors' own order: by name (shard_10 before shard_2).
    per_file = [sorted(tensors[i::files]) for i in range(files)]
    weight_map, total = {}, 0
    started = time.monotonic()
    for index, group in enumerate(per_file):
        name = f"model-{index + 1:05d}-of-{files:05d}.safetensors"
        header, offset = {}, 0
        for tensor, code, shape in group:
            size = _ELEMENT[code] * math.prod(shape)
            header[tensor] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
            weight_map[tensor] = name
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(out / name, "wb") as handle:
            handle.write(struct.pack("<Q", len(raw)) + raw)
            for tensor, code, shape in group:
                handle.write(_fill(tensor, code, shape, seed).tobytes())
        total += offset
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    rows, shard_rows = table_geometry(config)
    return {"bytes": total, "rows": rows, "shard_rows": shard_rows, "files": files, "write_s": time.monotonic() - started}


# --------------------------------------------------------------------------- load + lookup


def _register_inspect_only_architecture() -> None:
    """ModelConfig inspects the architecture's model class. The real Qwen4Exp model module cannot
    be imported on a CPU-only machine (flash-attention and other CUDA extensions), so a class that
    only answers ModelConfig's interface questions is registered under its name. Nothing built
    here uses it: the probe constructs and loads the real PLE layer."""
    from torch import nn
    from vllm import ModelRegistry

    class Qwen4ExpInspectOnly(nn.Module):
        def __init__(self, *, vllm_config=None, prefix: str = "") -> None:
            super().__init__()

        def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
            raise NotImplementedError("inspection only")

        def compute_logits(self, hidden_states):
            raise NotImplementedError("inspection only")

        def embed_input_ids(self, input_ids):
            raise NotImplementedError("inspection only")

    ModelRegistry.register_model("Qwen4ExpForCausalLM", Qwen4ExpInspectOnly)


def _vllm_config(step: dict):
    from vllm.config import EngramConfig, LoadConfig, ModelConfig, ParallelConfig, VllmConfig

    mode = step["mode"]
    engram = EngramConfig(
        cpu_offload=mode != "resident", mmap_table=mode == "mmap", mmap_table_dir=step.get("table_dir")
    )
    ckpt = step["ckpt"]
    model = ModelConfig(model=ckpt, dtype=step.get("dtype", "bfloat16"), skip_tokenizer_init=True, tokenizer=ckpt)
    return VllmConfig(
        model_config=model,
        load_config=LoadConfig(load_format="safetensors"),
        parallel_config=ParallelConfig(tensor_parallel_size=step.get("tp", 1)),
        engram_config=engram,
    )


def _probe_ids(rows: int, shard_rows: int, tp: int, seed: int, count: int):
    import numpy as np

    per_rank = -(-rows // tp)
    fixed = {0, 1, rows - 2, rows - 1}
    for rank in range(1, tp):  # both sides of each rank boundary
        fixed |= {rank * per_rank - 1, rank * per_rank}
    for rank in range(tp):  # each rank's first 32 rows: the first 8 KiB of its table file
        fixed |= set(range(rank * per_rank, rank * per_rank + 32))
    for shard in (1, 2, 3, rows // shard_rows - 1):  # both sides of checkpoint shard boundaries
        fixed |= {shard * shard_rows - 1, shard * shard_rows}
    rng = np.random.default_rng(seed)
    random = rng.integers(0, rows, size=count)
    return np.array(sorted(i for i in fixed if 0 <= i < rows) + random.tolist(), dtype=np.int64)


def _expected_rows(ckpt: Path, ids, shard_rows: int, param: str):
    """The rows of ``ids`` read straight from the safetensors files: pread at the offsets each
    file's JSON header gives (POSIX_FADV_RANDOM, so a 1 GiB container does not spend minutes on
    readahead), cross-checked against the safetensors library for the first ids."""
    import numpy as np
    import torch
    from safetensors import safe_open

    index = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    files: dict[str, tuple[int, int, dict]] = {}
    rows = []
    for i in ids.tolist():
        shard, within = divmod(i, shard_rows)
        name = f"{CKPT_PREFIX}.ngram_embedding.shard_{shard}.{param}"
        path = str(ckpt / index[name])
        if path not in files:
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            (length,) = struct.unpack("<Q", os.pread(fd, 8, 0))
            files[path] = (fd, 8 + length, json.loads(os.pread(fd, length, 8)))
        fd, data_start, header = files[path]
        entry = header[name]
        row_bytes = _ELEMENT[entry["dtype"]] * entry["shape"][1]
        rows.append(np.frombuffer(os.pread(fd, row_bytes, data_start + entry["data_offsets"][0] + within * row_bytes), dtype=np.uint8))
    for fd, _, _ in files.values():
        os.close(fd)
    expected = np.stack(rows)
    for position, i in enumerate(ids[:8].tolist()):  # the library reads the same bytes
        shard, within = divmod(i, shard_rows)
        name = f"{CKPT_PREFIX}.ngram_embedding.shard_{shard}.{param}"
        with safe_open(str(ckpt / index[name]), framework="pt") as handle:
            row = handle.get_slice(name)[within : within + 1, :].contiguous().view(torch.uint8).numpy()[0]
        if not np.array_equal(row, expected[position]):
            raise AssertionError(f"pread and the safetensors library disagree on row {i}")
    return expected


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_CGROUP = Path("/sys/fs/cgroup")


def _cgroup_read(v2: str, v1: str) -> str | None:
    """A memory controller file of this container's cgroup (v2 name, v1 name)."""
    for path in (_CGROUP / v2, _CGROUP / "memory" / v1):
        try:
            return path.read_text()
        except OSError:
            continue
    return None


def _oom_kill_count() -> int | None:
    """Processes of this container the OOM killer has killed (v2 memory.events, v1 memory.oom_control)."""
    text = _cgroup_read("memory.events", "memory.oom_control")
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return None


def _cgroup_mib(v2: str, v1: str) -> float | None:
    text = _cgroup_read(v2, v1)
    return round(int(text) / 2**20, 1) if text and text.strip().isdigit() else None


def run_rank(rank: int, step: dict, port: int) -> dict:
    import numpy as np
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.model_executor.model_loader.utils import process_weights_after_loading
    from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
    from vllm.models.qwen4_exp.common.ple_mmap import checkpoint_files
    from vllm.models.qwen4_exp.nvidia.ngram_embedding import Qwen4ExpNGramEmbedding

    ckpt = Path(step["ckpt"])
    tp = step.get("tp", 1)
    started = time.monotonic()
    vllm_config = _vllm_config(step)
    hf_config = vllm_config.model_config.hf_text_config
    result: dict = {"rank": rank}
    with set_current_vllm_config(vllm_config):
        init_distributed_environment(
            world_size=tp, rank=rank, local_rank=rank, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{port}",
        )  # fmt: skip
        initialize_model_parallel(tensor_model_parallel_size=tp, backend="gloo")
        started = time.monotonic()
        layer = Qwen4ExpNGramEmbedding(
            hf_config,
            int(hf_config.ple_embed_dim),
            0,
            step.get("max_tokens", 256),
            data_parallel_rank=0,
            prefix=PREFIX,
            quant_config=None,
            params_dtype=vllm_config.model_config.dtype,
        )
        embedding = layer.ngram_embedding
        result["class"] = type(embedding).__name__
        result["rows"] = [embedding.shard_indices.org_vocab_start_index, embedding.shard_indices.org_vocab_end_index]
        files = [str(p) for p in checkpoint_files(ckpt)]
        strip = f"{CKPT_PREFIX}."
        weights = (
            (name[len(strip) :], tensor)
            for name, tensor in safetensors_weights_iterator(files, False)
            if name.startswith(strip) and not name.endswith("weight_extra")
        )
        layer.load_weights(weights)
        process_weights_after_loading(layer, vllm_config.model_config, torch.device("cpu"))
        result["load_s"] = round(time.monotonic() - started, 2)
        result["peak_rss_mib"] = round(_peak_rss_mib(), 1)
        if getattr(embedding, "mapped_tables", None):
            result["storage"] = embedding.mapped_tables[0].description

        rows, shard_rows = table_geometry(json.loads((ckpt / "config.json").read_text()))
        ids = _probe_ids(rows, shard_rows, tp, step.get("seed", 1), step.get("random_ids", 2000))
        heads = layer.ngram_heads
        ids_2d = torch.from_numpy(np.concatenate([ids, ids[: (-len(ids)) % heads]])).view(-1, heads)
        lookup_started = time.monotonic()
        if step["mode"] == "resident":
            looked = embedding(ids_2d)
        else:
            local = embedding._lookup(ids_2d)  # this rank's rows, zeros for other ranks' rows
            result["lookup_s"] = round(time.monotonic() - lookup_started, 3)
            looked = embedding.sync_lookup(ids_2d)  # after the ETP all-reduce: every row
            local_check = _compare(local, ids_2d, embedding, step, shard_rows, owned_only=True)
            result.update(local_rows_ok=local_check["ok"], local_mismatches=local_check["mismatches"])
        check_started = time.monotonic()
        check = _compare(looked, ids_2d, embedding, step, shard_rows, owned_only=False)
        result["check_s"] = round(time.monotonic() - check_started, 2)
        result.update(ids=int(ids_2d.numel()), lookups_ok=check["ok"], mismatches=check["mismatches"])
        result["peak_rss_mib"] = round(_peak_rss_mib(), 1)
    return result


def _compare(looked, ids_2d, embedding, step: dict, shard_rows: int, *, owned_only: bool) -> dict:
    """Bytes of ``looked`` against the safetensors rows (decoded like the engine for nvfp4)."""
    import numpy as np
    import torch

    ckpt, method = Path(step["ckpt"]), step.get("method", "unquantized")
    flat_ids = ids_2d.reshape(-1).numpy()
    start, end = embedding.shard_indices.org_vocab_start_index, embedding.shard_indices.org_vocab_end_index
    if method == "nvfp4":
        from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import dequantize_to_dtype

        weight = torch.from_numpy(_expected_rows(ckpt, flat_ids, shard_rows, "weight"))
        scale = torch.from_numpy(_expected_rows(ckpt, flat_ids, shard_rows, "weight_scale")).view(torch.float8_e4m3fn)
        decoded = dequantize_to_dtype(weight, scale, embedding.weight_scale_2, embedding.params_dtype, swizzle=False)
        expected = decoded.contiguous().view(torch.uint8).numpy().reshape(len(flat_ids), -1)
    else:
        expected = _expected_rows(ckpt, flat_ids, shard_rows, "weight")
        stored = _TORCH[step.get("stored", "BF16")]
        if method == "unquantized" and embedding.params_dtype != stored:  # the engine casts on load
            cast = torch.from_numpy(expected.copy()).view(stored).to(embedding.params_dtype)
            expected = cast.contiguous().view(torch.uint8).numpy()
    if owned_only:
        owned = (flat_ids >= start) & (flat_ids < end)
        expected = np.where(owned[:, None], expected, 0)
    elif step.get("tp", 1) > 1 and method != "fp8":
        # The ETP all-reduce adds the other ranks' zero rows: bit for bit the same row, except that
        # -0.0 + 0.0 is +0.0 (FP8 tables reduce raw bytes and keep every bit).
        reduced = torch.from_numpy(expected.copy()).view(looked.dtype)
        expected = (reduced + torch.zeros_like(reduced)).contiguous().view(torch.uint8).numpy()
    got = looked.reshape(len(flat_ids), -1).contiguous().view(torch.uint8).numpy()
    bad = np.flatnonzero((got != expected).any(axis=1))
    return {"ok": bool(len(bad) == 0), "mismatches": [int(flat_ids[i]) for i in bad[:10]]}


def _rank_child(rank: int, step: dict, port: int, queue) -> None:
    try:
        queue.put(run_rank(rank, step, port))
    except BaseException as exc:  # reported by the parent
        import traceback

        queue.put({"rank": rank, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]})


def load_step(step: dict) -> dict:
    """Every TP rank in a forked process; the step's verdict and the cgroup's OOM kills."""
    import multiprocessing
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    before = _oom_kill_count()
    ranks = [context.Process(target=_rank_child, args=(r, step, port, queue)) for r in range(step.get("tp", 1))]
    for process in ranks:
        process.start()
    results = []
    while any(p.is_alive() for p in ranks) or not queue.empty():
        try:
            results.append(queue.get(timeout=0.5))
        except Exception:  # queue.Empty: keep waiting while a rank lives
            continue
    for process in ranks:
        process.join()
    after = _oom_kill_count()
    codes = [p.exitcode for p in ranks]
    oom_kills = None if before is None or after is None else after - before
    ok = all(c == 0 for c in codes) and len(results) == len(ranks) and all(
        r.get("lookups_ok") and r.get("local_rows_ok", True) for r in results
    )
    table_dir = Path(step["table_dir"]) if step.get("table_dir") else None
    table_files = (
        {p.name: p.stat().st_ino for p in sorted(table_dir.glob("*.pletable"))} if table_dir and table_dir.is_dir() else {}
    )
    return {
        "ok": ok,
        "ranks": sorted(results, key=lambda r: r["rank"]),
        "exitcodes": codes,
        "oom_kills": oom_kills,
        "table_files": table_files,  # name -> inode: a rebuilt file is a new inode
        "cgroup_limit_mib": _cgroup_mib("memory.max", "memory.limit_in_bytes"),
    }


def damage_step(step: dict) -> dict:
    """Flip one byte at ``offset`` of, or truncate by ``cut`` bytes, every table file in ``dir``."""
    done = []
    for path in sorted(Path(step["dir"]).glob("*.pletable")):
        if "flip" in step:
            with open(path, "r+b") as handle:
                handle.seek(step["flip"])
                byte = handle.read(1)
                handle.seek(step["flip"])
                handle.write(bytes([byte[0] ^ 0xFF]))
        if "cut" in step:
            os.truncate(path, path.stat().st_size - step["cut"])
        done.append(path.name)
    return {"ok": bool(done), "files": done}


def uncache_step(step: dict) -> dict:
    """fsync, then POSIX_FADV_DONTNEED, every file in ``dir``. A checkpoint written by another
    container stays cached and charged to that container's cgroup; a mapped load would map
    those cached pages and count them in its RSS. Dropped, they are faulted in afresh."""
    done = []
    for path in sorted(Path(step["dir"]).iterdir()):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        done.append(path.name)
    return {"ok": bool(done), "files": done}


def config_step(step: dict) -> dict:
    """EngramConfig / VllmConfig validation of mmap_table, case by case: the message each raises
    (or the resolved values), against the substring the case expects."""
    from vllm.config import EngramConfig, ModelConfig, VllmConfig

    def model(ckpt: str):
        return ModelConfig(model=ckpt, dtype="bfloat16", skip_tokenizer_init=True, tokenizer=ckpt)

    def engram(env: dict | None = None, **kwargs):
        return _with_env(env or {}, lambda: EngramConfig(**kwargs))

    cases = {
        "needs cpu_offload": (lambda: engram(cpu_offload=False, mmap_table=True), "mmap_table requires cpu_offload=True"),
        "refuses use_thp": (lambda: engram(mmap_table=True, use_thp=True), "use_thp and mmap_table exclude each other"),
        "refuses dp_shared_memory": (lambda: engram(mmap_table=True, dp_shared_memory=True), "dp_shared_memory and mmap_table exclude each other"),
        "lookup needs mmap_table": (lambda: engram(mmap_lookup="gather"), "only applies with mmap_table=True"),
        "env alias turns it on": (lambda: engram({"VLLM_PLE_MMAP_TABLE": "1"}).mmap_table, "True"),
        "env alias 0 keeps it off": (lambda: engram({"VLLM_PLE_MMAP_TABLE": "0"}).mmap_table, "False"),
        "env alias contradicting config": (lambda: engram({"VLLM_PLE_MMAP_TABLE": "1"}, mmap_table=False), "contradicts engram config mmap_table=False"),
        "env alias not a boolean": (lambda: engram({"VLLM_PLE_MMAP_TABLE": "yes"}), "is not a boolean"),
        "table dir from env": (lambda: engram({"VLLM_PLE_MMAP_TABLE_DIR": "/tables"}, mmap_table=True).mmap_table_dir, "/tables"),
        "dir does not change the hash": (
            lambda: engram(mmap_table=True, mmap_table_dir="/a").compute_hash() == engram(mmap_table=True, mmap_table_dir="/b").compute_hash()
            != engram().compute_hash(),
            "True",
        ),
        "DP replicas do not default to /dev/shm sharing": (
            lambda: _resolved_dp_shared(engram(mmap_table=True)), "False"
        ),
        "PLE model accepts it": (
            lambda: VllmConfig(model_config=model(step["ple_ckpt"]), engram_config=engram(mmap_table=True)).engram_config.mmap_table, "True"
        ),
        "model without PLE refuses the config": (
            lambda: VllmConfig(model_config=model(step["plain_ckpt"]), engram_config=engram(mmap_table=True)),
            "requires a model with supported Engram embeddings",
        ),
        "model without PLE refuses the env alias": (
            lambda: _with_env({"VLLM_PLE_MMAP_TABLE": "1"}, lambda: VllmConfig(model_config=model(step["plain_ckpt"]))),
            "this model has no n-gram embedding layers",
        ),
    }
    results = []
    for name, (make, expect) in cases.items():
        try:
            got = str(make())
        except Exception as exc:  # the refusals under test
            got = f"{type(exc).__name__}: {exc}"
        results.append({"case": name, "ok": expect in got, "got": got[-300:]})
    return {"ok": all(r["ok"] for r in results), "cases": results}


def _with_env(env: dict, make):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return make()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _resolved_dp_shared(engram) -> bool:
    from vllm.config import ParallelConfig

    engram.resolve_dp_shared_memory(ParallelConfig(data_parallel_size=2))
    return bool(engram.dp_shared_memory)


_TORCH: dict = {}


def main() -> int:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # this torch has no accelerator
    plan = json.loads(Path(sys.argv[1]).read_text())
    import torch

    torch.set_num_threads(1)
    _TORCH.update(BF16=torch.bfloat16, F16=torch.float16, F32=torch.float32, F8_E4M3=torch.float8_e4m3fn, U8=torch.uint8)
    # Imported before the ranks fork (see the module docstring).
    import vllm.model_executor.model_loader.utils  # noqa: F401
    import vllm.model_executor.model_loader.weight_utils  # noqa: F401
    import vllm.models.qwen4_exp.nvidia.ngram_embedding  # noqa: F401
    from vllm.config import LoggingConfig
    from vllm.logger import configure_logging

    configure_logging(LoggingConfig())  # vLLM's INFO lines (table file progress, storage)
    _register_inspect_only_architecture()
    failures = 0
    for step in plan:
        kind = step["step"]
        started = time.monotonic()
        if kind == "write":
            config = model_config(
                base=step["base"], split=step.get("split", 512), method=step.get("method", "unquantized"),
                embed_dim=step.get("embed_dim", 2048), heads_per_ngram=step.get("heads_per_ngram", 8),
                ple_layers=step.get("ple_layers"),
            )  # fmt: skip
            result = {"ok": True, "checkpoint": write_checkpoint(
                Path(step["out"]), config=config, dtype=step.get("stored", "BF16"),
                method=step.get("method", "unquantized"), files=step.get("files", 2), seed=step.get("seed", 0),
            )}  # fmt: skip
        elif kind == "load":
            result = load_step(step)
        elif kind == "damage":
            result = damage_step(step)
        elif kind == "config":
            result = config_step(step)
        elif kind == "uncache":
            result = uncache_step(step)
        else:
            raise ValueError(f"unknown step {kind!r}")
        if step.get("expect", "ok") == "oom":  # the control: killed by the cgroup's OOM killer
            passed = bool(result.get("oom_kills")) and -9 in result.get("exitcodes", [])
        else:
            passed = result["ok"]
        failures += not passed
        print(json.dumps({"name": step.get("name", kind), "step": kind, "passed": passed, "seconds": round(time.monotonic() - started, 1), **result}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""builder.plan against vLLM 0.33.0's own KV planning code, on the CPU, over a grid of configs.

For each config this builds the KV cache specs the way the Qwen4Exp layers declare them, with
vLLM's own classes (FullAttentionSpec customized as the patched QSA backend does, the indexer's
MLAAttentionSpec and CircularBufferSpec, GDN and PLE MambaSpecs from MambaStateShapeCalculator),
picks the block size with the real ``Platform._align_hybrid_block_size``, then groups and sizes
the pool with the real ``get_kv_cache_groups``, ``get_kv_cache_config_from_groups`` and
``get_kv_cache_capacity``; and compares block size, bytes per block, block count and pool with
builder.plan. Stand-ins replace only what needs a built model: the model-registry lookup, the
backend classes' kernel block sizes (QSA: MultipleOf(16); its state backend: MultipleOf(1)), the
Mamba checkpoint alignment (64 with FlashInfer GDN prefill, else None) and the layout (BLHNC).

vLLM's import chain needs a few pure-Python packages the builder venv lacks; heavy optional
imports (xgrammar, mistral_common, ...) are replaced by inert modules. Run:

    .venv/bin/builder patches fetch-engine
    .venv/bin/pip install --no-deps --target /tmp/vllm-deps cbor2 msgspec blake3 cachetools psutil \\
        py-cpuinfo pyzmq cloudpickle regex pybase64 aiohttp aiohappyeyeballs aiosignal frozenlist \\
        multidict yarl propcache attrs uvloop prometheus_client openai jiter distro sniffio \\
        "fastapi<0.137" starlette annotated-doc openai-harmony
    PYTHONPATH=~/.cache/qfn-int8kv/engine/vllm-0.33.0-src:/tmp/vllm-deps \\
        .venv/bin/python -m benchmarks.plan.vs_vllm --out evidence/plan
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import itertools
import json
import sys
import types
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Imported somewhere on vLLM's config import chain, never used by KV planning.
INERT = {"xgrammar", "llguidance", "outlines_core", "lm_format_enforcer", "mistral_common", "tiktoken",
         "partial_json_parser", "anthropic", "mcp", "uvicorn", "prometheus_fastapi_instrumentator",
         "compressed_tensors", "depyf", "numba", "cv2", "watchfiles", "pythonjsonlogger", "ijson", "setproctitle",
         "model_hosting_container_standards", "opentelemetry", "einops", "gguf", "sentencepiece", "flashinfer",
         "triton_kernels", "tvm_ffi"}


class _AnyMeta(type):
    def __getattr__(cls, name):
        return _stub_class(name)

    def __getitem__(cls, key):
        return cls

    def __or__(cls, other):
        return cls

    def __ror__(cls, other):
        return cls

    def __iter__(cls):
        return iter(())


def _stub_class(name: str):
    from pydantic_core import core_schema

    class Stub(metaclass=_AnyMeta):
        def __init__(self, *args, **kwargs):
            pass

        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            return core_schema.any_schema()

    Stub.__name__ = name
    return Stub


class _InertModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in INERT:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _InertModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _InertFinder())

import torch  # noqa: E402
from vllm.model_executor.layers.mamba import abstract as mamba_abstract  # noqa: E402
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.v1.attention.backend import MultipleOf  # noqa: E402
from vllm.v1.core import kv_cache_planning, kv_cache_utils  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    CircularBufferSpec,
    FullAttentionSpec,
    KVQuantMode,
    MambaSpec,
    MLAAttentionSpec,
    get_kv_quant_mode,
)
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402

import vllm.config.vllm as vllm_config_module  # noqa: E402
import vllm.model_executor.models as vllm_models  # noqa: E402
from builder.plan.architecture import ModelArchitecture, load_architecture_file, load_model_dir  # noqa: E402
from builder.plan.capacity import plan_dtype  # noqa: E402
from builder.plan.layout import load_layout  # noqa: E402
from builder.plan.models import ServingSetup  # noqa: E402

LAYOUT = load_layout()
TORCH_DTYPE = {"bfloat16": torch.bfloat16, "float32": torch.float32}
KV_TORCH = {"bfloat16": torch.bfloat16, "fp8_e4m3": torch.uint8, "int8_per_token_head": torch.int8}


class QSABackendStandIn:
    """The patched Qwen4ExpQSAFlashAttentionBackend's customize_spec and kernel block sizes."""

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(16)]

    @classmethod
    def customize_spec(cls, spec):
        if spec.kv_quant_mode != KVQuantMode.INT8_PER_TOKEN_HEAD:
            return spec
        tail = LAYOUT.int8_scale_bytes_per_block(spec.block_size, spec.num_kv_heads)
        return replace(spec, page_size_padded=spec.unpadded_page_size_bytes + tail)


class QSAStateBackendStandIn:
    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [MultipleOf(1)]


def _mamba_specs(arch: ModelArchitecture, tp: int, k: int):
    g, p = arch.gdn, arch.ple
    gdn = MambaSpec(shapes=MambaStateShapeCalculator.gated_delta_net_state_shape(
        tp, g.num_key_heads, g.num_value_heads, g.key_head_dim, g.value_head_dim, g.conv_kernel, k),
        dtypes=(torch.bfloat16, TORCH_DTYPE[g.ssm_dtype]), block_size=-1)
    ple = MambaSpec(shapes=MambaStateShapeCalculator.short_conv_state_shape(
        1, p.hidden_size * p.hc_count, (p.conv_kernel - 1) * p.ngram_size + 1, k),
        dtypes=(torch.bfloat16,), block_size=-1, tp_replicated=True)
    return gdn, ple


def vllm_block_size(arch: ModelArchitecture, kv: str, tp: int, k: int, mode: str, checkpoint: int | None):
    """The real Platform._align_hybrid_block_size, fed through stand-ins."""
    cache = types.SimpleNamespace(cache_dtype=kv, block_size=16, mamba_cache_mode=mode, mamba_page_size_padded=None,
                                  mamba_block_size=None)
    model = types.SimpleNamespace(use_mla=False, dtype=torch.bfloat16, architecture="Qwen4ExpForCausalLM",
                                  get_num_kv_heads=lambda pc: max(1, arch.num_key_value_heads // tp),
                                  get_head_size=lambda: arch.head_dim)
    vc = types.SimpleNamespace(cache_config=cache, model_config=model,
                               parallel_config=types.SimpleNamespace(tensor_parallel_size=tp))

    class Model:
        @classmethod
        def get_mamba_specs_from_config(cls, vllm_config):
            return _mamba_specs(arch, tp, k)

    vllm_models.ModelRegistry.resolve_model_cls = lambda name, model_config=None: (Model, name)
    mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda vllm_config: checkpoint
    Platform._find_non_ssm_backends = classmethod(lambda cls, vllm_config: [QSABackendStandIn, QSAStateBackendStandIn])
    vllm_config_module.set_current_vllm_config = lambda *a, **kw: contextlib.nullcontext()
    Platform._align_hybrid_block_size(vc, QSABackendStandIn)
    return cache.block_size, cache.mamba_page_size_padded


def vllm_pool(arch: ModelArchitecture, kv: str, tp: int, k: int, max_len: int, mode: str, checkpoint: int | None,
              kv_bytes: int) -> dict:
    block, padded = vllm_block_size(arch, kv, tp, k, mode, checkpoint)
    kv_heads = max(1, arch.num_key_value_heads // tp)
    main = QSABackendStandIn.customize_spec(FullAttentionSpec(
        block_size=block, num_kv_heads=kv_heads, head_size=arch.head_dim, dtype=KV_TORCH[kv],
        kv_quant_mode=get_kv_quant_mode(kv)))
    ix = arch.indexer
    ring = CircularBufferSpec(block_size=-(-(ix.compress_ratio + k) // ix.compress_ratio) * ix.compress_ratio,
                              num_kv_heads=1, head_size=ix.head_dim, head_size_v=0, dtype=torch.bfloat16)
    ck = MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=ix.head_dim, dtype=torch.bfloat16,
                          tokens_per_state=ix.compress_ratio)
    gdn, ple = _mamba_specs(arch, tp, k)
    state = {"block_size": block, "page_size_padded": padded, "mamba_cache_mode": mode, "num_speculative_blocks": k,
             "num_prefill_checkpoint_blocks": 1 if checkpoint else 0, "prefill_checkpoint_alignment": checkpoint}
    specs = {}
    for i in range(arch.attention_layers + (arch.mtp_layers if k else 0)):
        specs[f"layers.{i}.self_attn.attn"] = main
        specs[f"layers.{i}.self_attn.indexer.raw_key_cache"] = ring
        specs[f"layers.{i}.self_attn.indexer.compressed_key_cache"] = ck
    for i in range(arch.gdn.layers):
        specs[f"layers.{i}.linear_attn"] = replace(gdn, **state)
    for i in range(arch.ple.layers):
        specs[f"layers.{i}.ple"] = replace(ple, **state)
    cache = types.SimpleNamespace(get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLHNC,
                                  num_gpu_blocks_override=None, prefix_cache_retention_interval=0,
                                  mamba_cache_mode=mode)
    vc = types.SimpleNamespace(cache_config=cache, attention_config=types.SimpleNamespace(hisparse_config=None),
                               scheduler_config=types.SimpleNamespace(disable_hybrid_kv_cache_manager=False),
                               model_config=types.SimpleNamespace(max_model_len=max_len),
                               parallel_config=types.SimpleNamespace(decode_context_parallel_size=1))
    groups = kv_cache_planning.get_kv_cache_groups(vc, specs)
    config = kv_cache_planning.get_kv_cache_config_from_groups(vc, groups, kv_bytes)
    tokens, _ = kv_cache_utils.get_kv_cache_capacity(vc, config)
    return {"block_size": block, "bytes_per_block": kv_cache_planning._get_kv_cache_bytes_per_block(groups, KVCacheLayout.BLHNC),
            "num_blocks": config.num_blocks, "pool_tokens": tokens, "groups": len(groups)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    real = load_architecture_file("qwen3.8-flash-next").architecture
    models = {
        "qwen3.8-flash-next (data file, fp32 GDN state)": real,
        "qwen3.8-flash-next, bf16 GDN state": real.model_copy(update={"gdn": real.gdn.model_copy(update={"ssm_dtype": "bfloat16"})}),
        "tiny Qwen4Exp of the H200 run": load_model_dir(REPO / "evidence/plan/qwen4-exp-tiny-h200"),
    }
    kv_bytes = 17 * 2**30 + 12_345
    rows = []
    grid = itertools.product(models.items(), [1, 2], [0, 4], ["bfloat16", "fp8_e4m3", "int8_per_token_head"],
                             [4096, 262144], [("none", "triton"), ("align", "triton"), ("align", "flashinfer")])
    for (label, arch), tp, k, kv, max_len, (mode, backend) in grid:
        checkpoint = 64 if backend == "flashinfer" and mode == "align" else None
        theirs = vllm_pool(arch, kv, tp, k, max_len, mode, checkpoint, kv_bytes)
        setup = ServingSetup(engine="vllm-0.33.0", on_gpu=True, tensor_parallel_size=tp, max_model_len=max_len,
                             num_speculative_tokens=k, prefix_caching=mode == "align", mamba_cache_mode=mode,
                             gdn_prefill_backend=backend, model_dtype="bfloat16", start_block_size=16)
        ours = plan_dtype(arch, setup, kv_cache_dtype=kv, kv_bytes=kv_bytes, layout=LAYOUT)
        mine = {"block_size": ours.block_size, "bytes_per_block": ours.bytes_per_block, "num_blocks": ours.num_blocks,
                "pool_tokens": ours.pool_tokens, "groups": len(ours.groups)}
        rows.append({"model": label, "tp": tp, "mtp_k": k, "kv_cache_dtype": kv, "max_model_len": max_len,
                     "mamba_cache_mode": mode, "gdn_prefill_backend": backend, "vllm": theirs, "planner": mine,
                     "agree": theirs == mine})
    agree = sum(r["agree"] for r in rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vllm-crosscheck.json").write_text(json.dumps(
        {"engine": "vllm 0.33.0 (pure-Python sources of the pinned wheel)", "kv_bytes": kv_bytes,
         "configs": len(rows), "agree": agree, "rows": rows}, indent=2) + "\n")
    lines = ["| model | TP | MTP k | KV dtype | max_model_len | state mode | block (vLLM / plan) | pool tokens (vLLM / plan) | agree |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        v, p = r["vllm"], r["planner"]
        lines.append(f"| {r['model']} | {r['tp']} | {r['mtp_k']} | {r['kv_cache_dtype']} | {r['max_model_len']:,} | "
                     f"{r['mamba_cache_mode']}/{r['gdn_prefill_backend']} | {v['block_size']} / {p['block_size']} | "
                     f"{v['pool_tokens']:,} / {p['pool_tokens']:,} | {'yes' if r['agree'] else '**no**'} |")
    (args.out / "vllm-crosscheck.md").write_text(
        f"# builder.plan vs vLLM 0.33.0's KV planning code: {agree} of {len(rows)} configs agree\n\n"
        f"KV budget {kv_bytes:,} bytes per GPU in every row. Generated by `python -m benchmarks.plan.vs_vllm`.\n\n"
        + "\n".join(lines) + "\n")
    print(f"{agree} of {len(rows)} configs agree (block size, bytes per block, blocks, pool)")
    if agree != len(rows):
        sys.exit(1)


if __name__ == "__main__":
    main()

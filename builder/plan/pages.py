"""Bytes per page of every cache a layer keeps on one GPU, as vLLM 0.33.0's KV specs size them.

- QSA / dense attention: ``FullAttentionSpec`` pages of K and V rows; int8 pages add the fp32
  side-scale tail through the patch's own layout code (``builder.plan.layout``).
- QSA indexer: compressed keys (``MLAAttentionSpec``, one bf16 row per ``compress_ratio``
  tokens) and the raw-key ring (``CircularBufferSpec``, one block per request).
- Gated DeltaNet and PLE: ``MambaSpec`` states (conv + recurrent), fixed per request.
"""

from __future__ import annotations

from math import prod
from types import ModuleType

from pydantic import BaseModel, ConfigDict

from builder.errors import ConfigError
from builder.plan.architecture import GatedDeltaNet, ModelDtype, PerLayerEmbedding, QSAIndexer

DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}
#: vLLM stores fp8 KV as uint8 (one byte) and int8 KV as int8 plus the side scales.
KV_DTYPE_ELEMENT: dict[str, tuple[int, str]] = {
    "bfloat16": (2, "bfloat16"),
    "fp8": (1, "fp8 e4m3, one per-tensor scale"),
    "fp8_e4m3": (1, "fp8 e4m3, one per-tensor scale"),
    "int8_per_token_head": (1, "int8 + fp32 scale per (token, kv head) for K and V"),
}
#: The QSA indexer keeps its caches in bf16 unless --attention-config says fp8 (vLLM default "bf16").
INDEXER_DTYPE_BYTES = 2


class KVStorage(BaseModel):
    """How one --kv-cache-dtype stores a K or V element."""

    model_config = ConfigDict(frozen=True)

    kv_cache_dtype: str
    element_bytes: int
    side_scales: bool
    description: str


def kv_storage(kv_cache_dtype: str, *, model_dtype: ModelDtype) -> KVStorage:
    """auto stores K/V in the served model dtype; the others as named."""
    if kv_cache_dtype == "auto":
        size, what = DTYPE_BYTES[model_dtype], f"{model_dtype} (auto: the model dtype)"
    elif kv_cache_dtype in KV_DTYPE_ELEMENT:
        size, what = KV_DTYPE_ELEMENT[kv_cache_dtype]
    else:
        raise ConfigError(f"--kv-cache-dtype {kv_cache_dtype!r} is not one the planner sizes",
                          hint=f"use one of auto, {', '.join(KV_DTYPE_ELEMENT)}")
    return KVStorage(kv_cache_dtype=kv_cache_dtype, element_bytes=size,
                     side_scales=kv_cache_dtype == "int8_per_token_head", description=what)


def kv_page_bytes(storage: KVStorage, *, block_size: int, kv_heads: int, head_dim: int, layout: ModuleType) -> int:
    """One attention page on one GPU: K and V rows of ``block_size`` tokens, plus the int8 scale tail."""
    if storage.side_scales:
        return int(layout.int8_page_size_bytes(block_size, kv_heads, head_dim))
    return block_size * kv_heads * 2 * head_dim * storage.element_bytes


def scale_tail_bytes(storage: KVStorage, *, block_size: int, kv_heads: int, layout: ModuleType) -> int:
    return int(layout.int8_scale_bytes_per_block(block_size, kv_heads)) if storage.side_scales else 0


def local_kv_heads(kv_heads: int, tensor_parallel_size: int) -> int:
    """KV heads per GPU: split by TP, replicated once TP exceeds them (vLLM get_num_kv_heads)."""
    return max(1, kv_heads // tensor_parallel_size)


def compressed_key_page_bytes(indexer: QSAIndexer, *, block_size: int) -> int:
    """MLAAttentionSpec(tokens_per_state=compress_ratio): one key row per complete group."""
    return (block_size // indexer.compress_ratio) * indexer.head_dim * INDEXER_DTYPE_BYTES


def ring_capacity(indexer: QSAIndexer, *, num_speculative_tokens: int) -> int:
    """QSAKeyStateCache: the open group plus every draft row, rounded up to whole groups."""
    span = indexer.compress_ratio + num_speculative_tokens
    return -(-span // indexer.compress_ratio) * indexer.compress_ratio


def ring_page_bytes(indexer: QSAIndexer, *, num_speculative_tokens: int) -> int:
    """CircularBufferSpec: one bf16 raw key per slot of the ring (no MRoPE positions: text only)."""
    return ring_capacity(indexer, num_speculative_tokens=num_speculative_tokens) * indexer.head_dim * INDEXER_DTYPE_BYTES


def _divide(value: int, by: int, what: str) -> int:
    if value % by:
        raise ConfigError(f"{what} ({value}) is not divisible by tensor_parallel_size {by}",
                          hint="vLLM shards it evenly over TP ranks; pick a TP size that divides it")
    return value // by


def gdn_state_bytes(gdn: GatedDeltaNet, *, tensor_parallel_size: int, num_speculative_tokens: int,
                    model_dtype: ModelDtype) -> int:
    """MambaStateShapeCalculator.gated_delta_net_state_shape: conv state + recurrent state, one GPU."""
    conv_dim = gdn.key_head_dim * gdn.num_key_heads * 2 + gdn.value_head_dim * gdn.num_value_heads
    conv = _divide(conv_dim, tensor_parallel_size, "GDN conv dim") * (gdn.conv_kernel - 1 + num_speculative_tokens)
    recurrent = _divide(gdn.num_value_heads, tensor_parallel_size, "GDN value heads") * gdn.value_head_dim * gdn.key_head_dim
    return conv * DTYPE_BYTES[model_dtype] + recurrent * DTYPE_BYTES[gdn.ssm_dtype]


def ple_state_bytes(ple: PerLayerEmbedding, *, num_speculative_tokens: int, model_dtype: ModelDtype) -> int:
    """Qwen4Exp PLE short-conv state: hidden * hc_count channels, dilated window, replicated on every rank."""
    conv_state_len = (ple.conv_kernel - 1) * ple.ngram_size
    return prod((ple.hidden_size * ple.hc_count, conv_state_len + num_speculative_tokens)) * DTYPE_BYTES[model_dtype]

"""What `builder plan` computes: typed, so the CLI, the model card and the kv_pool gate read one thing."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from builder.plan.architecture import ModelDtype
from builder.plan.budget import KVBudget
from builder.plan.grouping import CacheGroup


class ServingSetup(BaseModel):
    """The engine settings that size the cache, resolved from the target config."""

    model_config = ConfigDict(frozen=True)

    engine: str
    on_gpu: bool = Field(description="False for a CPU target (vllm-cpu).")
    tensor_parallel_size: int
    max_model_len: int
    num_speculative_tokens: int
    prefix_caching: bool
    mamba_cache_mode: Literal["none", "align"] | None = Field(description="Recurrent-state mode; None for a dense model.")
    gdn_prefill_backend: Literal["flashinfer", "triton"] | None
    model_dtype: ModelDtype
    start_block_size: int


class DtypePlan(BaseModel):
    """The cache layout and the pool of one KV dtype, per GPU."""

    model_config = ConfigDict(frozen=True)

    kv_cache_dtype: str
    storage: str = Field(description="How K and V elements are stored.")
    configured: bool = Field(description="The target's kv_cache.dtype.")
    block_size: int = Field(description="Tokens per block after hybrid page alignment.")
    block_step: int = Field(description="Alignment step the block size is a multiple of.")
    attention_layers: int = Field(description="Layers with a per-token KV cache on each GPU, MTP draft layers included.")
    kv_bytes_per_token_per_layer: float = Field(description="K + V (+ int8 scales) of one token in one attention layer.")
    scale_bytes_per_token_per_layer: float = Field(description="The int8 fp32 scale tail's share of it.")
    indexer_bytes_per_token_per_layer: float = Field(description="QSA indexer compressed keys (bf16, any KV dtype).")
    attention_bytes_per_token: float = Field(description="Every attention-layer cache of one token (all layers).")
    state_page_bytes: int | None = Field(description="Largest recurrent-state page (GDN / PLE) before padding.")
    page_bytes: int = Field(description="One attention page: block_size tokens of one layer.")
    bytes_per_block: int = Field(description="Bytes one block id occupies (the widest group).")
    groups: list[CacheGroup]
    pages_per_request: int = Field(description="Blocks one request at max_model_len takes, all groups.")
    num_blocks: int
    pool_tokens: int = Field(description="KV pool as vLLM reports it: concurrency x max_model_len.")
    concurrency: float = Field(description="Requests at max_model_len that fit at once (vLLM's 'maximum concurrency').")
    sessions: int = Field(description="Whole sessions at max_model_len.")
    effective_bytes_per_token: float | None = Field(description="KV budget / pool tokens: state blocks and rounding included.")


class CapacityPlan(BaseModel):
    """`builder plan` for one target: the budget, and the layout and pool per KV dtype."""

    model_config = ConfigDict(frozen=True)

    target: str
    model: str
    architecture_source: str
    setup: ServingSetup
    budget: KVBudget
    configured_dtype: str
    dtypes: list[DtypePlan]
    notes: list[str] = Field(default_factory=list)

    def for_dtype(self, kv_cache_dtype: str) -> DtypePlan | None:
        return next((d for d in self.dtypes if d.kv_cache_dtype == kv_cache_dtype), None)

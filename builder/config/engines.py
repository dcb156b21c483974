"""Engine profiles: which vLLM build a target runs and how that build spells each setting.

They are data the targets refer to by id; adding an engine means adding one entry here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from builder.config._base import StrictModel
from builder.constants import ENGINE_FORK_VERSION, ENGINE_UPSTREAM_VERSION

EngineId = Literal["vllm-0.33.0", "vllm-fork-preview", "vllm-cpu-0.32.0"]


class EngineProfile(StrictModel):
    """A vLLM build and the spelling of the settings that differ between builds."""

    id: EngineId = Field(description="Profile id that targets name in `engine.profile`.")
    package: str = Field(description="The pip distribution that provides the engine.")
    version: str = Field(description="The engine version the patch series and launch are made for.")
    int8_patch_set: bool = Field(
        description="Whether bundle/patches/ has an int8_per_token_head series for this engine; "
        "without it the engine rejects int8 KV on the QSA path."
    )
    ple_style: Literal["env", "engram", "none"] = Field(
        description="How PLE offload is configured: fork engines read VLLM_PLE_* env vars; "
        "upstream 0.33 reads an engram config; CPU builds have no PLE."
    )
    ple_mmap: bool = Field(
        default=False,
        description="Whether the engine itself can memory-map the PLE table instead of pinning it in host RAM.",
    )
    ple_mmap_patch: str | None = Field(
        default=None,
        description="The patch of bundle/patches/series (its '# qfn-int8kv patch:' name) that adds PLE "
        "table memory-mapping to this engine; mmap is on when the series carries it and the target "
        "applies the series.",
    )
    kv_cache_dtypes: tuple[str, ...] = Field(
        description="KV cache dtypes (--kv-cache-dtype values) this engine serves the model with; "
        "int8_per_token_head only where the patch series is applied. `builder plan` sizes each."
    )
    kv_block_size: int | None = Field(
        default=None,
        description="Tokens per KV block the engine starts from before hybrid page alignment; None when "
        "the capacity planner does not model this engine's allocator.",
    )
    wheel_lock: bool = Field(
        default=False,
        description="Whether docker/locks/ has per-platform wheel locks of this engine (base_source = wheel-lock).",
    )
    ray_executor_gap: str | None = Field(
        default=None,
        description="Why the engine refuses the Ray executor (--distributed-executor-backend ray, the executor that "
        "spans hosts), where it does: what a launch warns; None where the engine runs its workers through Ray.",
    )
    api_server_module: str = Field(
        default="vllm.entrypoints.openai.api_server",
        description="Module the launch starts with `python -m`: the server `vllm serve` runs, without "
        "depending on the console script (a vllm-cpu 0.32.0 install lacks the `vllm` metadata it reads; our "
        "images add it, so `vllm` works there too).",
    )


ENGINE_PROFILES: dict[str, EngineProfile] = {
    p.id: p
    for p in (
        EngineProfile(
            id="vllm-0.33.0",
            package="vllm",
            version=ENGINE_UPSTREAM_VERSION,
            int8_patch_set=True,
            ple_style="engram",
            kv_cache_dtypes=("bfloat16", "fp8_e4m3", "int8_per_token_head"),
            # CacheConfig.DEFAULT_BLOCK_SIZE; the QSA backend takes MultipleOf(16).
            kv_block_size=16,
            ple_mmap_patch="ple-mmap",
            wheel_lock=True,
        ),
        EngineProfile(
            id="vllm-fork-preview",
            package="vllm",
            version=ENGINE_FORK_VERSION,
            int8_patch_set=False,
            ple_style="env",
            ple_mmap=True,
            kv_cache_dtypes=("bfloat16", "fp8_e4m3"),
        ),
        EngineProfile(
            id="vllm-cpu-0.32.0",
            package="vllm-cpu",
            version="0.32.0",
            int8_patch_set=False,
            ple_style="none",
            # fp8 and int8 need AVX-512 or AMX in vllm-cpu (evidence/cpu-smoke/fp8-refused/server.log).
            kv_cache_dtypes=("auto", "bfloat16"),
            # block_size in vllm:cache_config_info of the cpu-smoke runs (evidence/cpu-smoke/kv_pool.json).
            kv_block_size=128,
            ray_executor_gap="vllm-cpu 0.32.0 refuses the Ray executor: its CPU platform names no Ray device "
            "(Platform.ray_device_key is empty), so vllm/v1/executor/ray_utils.py:574 (initialize_ray_cluster) raises "
            "'current platform cpu does not support ray' about 20 s into the start, with the Ray cluster formed",
        ),
    )
}

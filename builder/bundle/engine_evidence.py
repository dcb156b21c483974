"""The engine harness's pool and fidelity checks as the model card reads them.

benchmarks/engine/report.py writes these from real engine runs (evidence/engine-h200/); the card
quotes them under "measured", never as the real model's numbers.
"""

from __future__ import annotations

from typing import Literal

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


# --- the engine A/B (benchmarks/engine/ab.py, benchmarks/engine/ab_report.py)

#: The A/B's metrics per repeat, as `vllm bench serve` names them; the arm with the lower value is
#: better on all but output_throughput.
AB_METRICS = ("median_ttft_ms", "median_tpot_ms", "median_itl_ms", "p99_itl_ms", "output_throughput")
HIGHER_IS_BETTER = frozenset({"output_throughput"})
#: The ratios the card states: int8 over each other KV dtype, arms by their A/B labels.
AB_RATIOS = (("int8", "fp8"), ("int8", "bf16"))
Verdict = Literal["faster", "slower", "no difference measured", "too few repeats"]
#: A ratio over fewer repeats than this (on either arm) gets no verdict: a percentile bootstrap of a
#: median over 2-4 repeats excludes 1.0 far more often than 5% of the time when the arms are alike.
MIN_VERDICT_REPEATS = 5


def verdict_of(*, low: float, high: float, n: int, lower_is_better: bool) -> Verdict:
    """The numerator arm's verdict on a ratio with interval [low, high] over n repeats: faster or slower
    only where the interval excludes 1.0 and both arms have MIN_VERDICT_REPEATS repeats."""
    if n < MIN_VERDICT_REPEATS:
        return "too few repeats"
    if low <= 1.0 <= high:
        return "no difference measured"
    return "faster" if (high < 1.0) == lower_is_better else "slower"


class Estimate(BaseModel):
    """A median over repeats (or a ratio of two arms' medians) with its bootstrap 95% interval."""

    model_config = ConfigDict(frozen=True)

    value: float
    low: float
    high: float
    n: int = Field(gt=0, description="Repeats behind it (a ratio: the fewer of its two arms').")


class RatioEstimate(Estimate):
    verdict: Verdict = Field(description="The numerator arm's (verdict_of): only where the interval excludes 1.0.")


class ABCell(BaseModel):
    """One cell of the grid: every arm's medians, int8's ratios to the others, and each variant arm's to
    its base arm ('int8-pinned/int8')."""

    model_config = ConfigDict(frozen=True)

    input_len: int = Field(gt=0)
    concurrency: int = Field(gt=0)
    medians: dict[str, dict[str, Estimate]] = Field(description="arm label -> metric (AB_METRICS) -> median.")
    ratios: dict[str, dict[str, RatioEstimate]] = Field(
        description="'int8/fp8' -> metric -> ratio of medians; only pairs whose arms both have repeats.")


class StepBreakdown(BaseModel):
    """Where one arm's decode step goes in one cell, from its profiled pass (benchmarks/engine/breakdown.py)."""

    model_config = ConfigDict(frozen=True)

    arm: str
    input_len: int = Field(gt=0)
    concurrency: int = Field(gt=0)
    step_kind: Literal["decode", "mixed"]
    step_us: float = Field(gt=0, description="Mean wall time per step: the families sum to it (less overlap).")
    step_us_median: float | None = Field(default=None, gt=0,
                                         description="Median wall time per step: what the measured ITL p50 is held to.")
    families: dict[str, float] = Field(
        description="us per step per kernel family (GPU time of the profiled pass), then the host's share: the "
                    "measured ITL p50 less the GPU's busy time (the profiled step's idle time where no ITL was measured).")
    gpu_busy_us: float | None = Field(default=None, ge=0, description="GPU busy time per profiled step.")
    idle_after: dict[str, float] = Field(default_factory=dict,
                                         description="The profiled step's idle time by the GPU work each gap follows.")
    host_step_us: float | None = Field(default=None, gt=0,
                                       description="The host's time per step: from one step's launch to the next's.")
    host_before: dict[str, float] = Field(
        default_factory=dict, description="The host's us per step before each launch, by what it launches.")
    host_calls: int | None = Field(default=None, ge=1, description="CUDA calls in the commonest step.")
    host_sequence_digest: str | None = Field(
        default=None, description="Digest of the commonest step's CUDA calls in order: equal, the same host work.")
    host_sequence_share: float | None = Field(default=None, ge=0, le=1,
                                              description="The share of steps that made exactly those calls.")
    measured_itl_ms: float | None = Field(default=None, description="The timed repeats' median ITL p50.")
    accounting_gap: float | None = Field(default=None,
                                         description="|profiled median step - measured ITL p50| / measured ITL p50.")
    bound: str = Field(description="What bounds the step: the largest row of `families`.")


class EngineAB(BaseModel):
    """The engine A/B of one run: each KV dtype served alone, the same prompts, repeats per cell."""

    model_config = ConfigDict(frozen=True)

    run: str = Field(description="Which run, in words a reader can find (its name and summary file).")
    label: str = Field(description="What was served and where: never the real model's numbers.")
    hardware: str
    mtp_k: int = Field(ge=0, description="Speculative tokens per step; 0: MTP off.")
    order: list[str] = Field(description="Arm labels in the order they were served.")
    cells: list[ABCell]
    breakdown: list[StepBreakdown] = Field(default_factory=list)
    agreement: dict[str, float] = Field(
        default_factory=dict,
        description="'ARM LENxCONC' -> |median TPOT of a second run - this run's| / this run's, where one was given.")
    agreement_run: str | None = Field(default=None, description="The second run `agreement` compares with.")

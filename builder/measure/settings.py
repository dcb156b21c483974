"""Typed inputs of the gates: a target's resolved thresholds and the per-model expectation file.

The expectation file says what a correct answer from one model looks like, so the same file
judges every KV dtype that model is served with.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from builder.config.models import Gates, ReleaseConfig
from builder.constants import EXPECTATIONS_DIR, KV_POOL_FLOOR_MARGIN_ESTIMATED, KV_POOL_FLOOR_MARGIN_EXACT
from builder.errors import BuilderError, ConfigError
from builder.plan import plan_target


#: Needle length on long-context targets (the seed bundle's 128K), capped by the context.
NEEDLE_DEFAULT_TOKENS = 131072
#: Room the needle prompt leaves for the answer under max_model_len.
NEEDLE_CONTEXT_MARGIN = 256


class PlannedPool(BaseModel):
    """What builder.plan expects of the configured KV dtype: the kv_pool gate reports against it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_cache_dtype: str
    pool_tokens: int = Field(ge=0)
    block_size: int
    pages_per_request: int = Field(gt=0, description="Blocks one request at max_model_len takes.")
    bytes_per_block: int = Field(gt=0)
    max_model_len: int
    kv_bytes: int = Field(description="The planned KV budget per GPU.")
    budget_exact: bool = Field(description="False when the budget rests on estimated or assumed terms.")


class GateSettings(BaseModel):
    """The target's [gates] section with every default resolved against its config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gates: Gates
    expectations: str
    needle_tokens: int = Field(gt=0)
    prefix_tokens: int = Field(gt=0)
    kv_pool_floor_tokens: int = Field(gt=0)
    kv_pool_target_tokens: int = Field(gt=0)
    kv_pool_thresholds_from: Literal["target file", "planner", "target file and planner"] = "target file"
    kv_pool_plan: PlannedPool | None = None
    kv_pool_plan_error: str | None = Field(default=None, description="Why there is no plan, when there is none.")


def planned_pool(cfg: ReleaseConfig, *, model_dir: Path | None = None) -> PlannedPool:
    """builder.plan's pool for the configured KV dtype (its budget as the target launches), from the
    snapshot's config.json when `model_dir` is given, else the model's architecture file."""
    plan = plan_target(cfg, kv_dtypes=[cfg.kv_cache.dtype], model_dir=model_dir)
    d = plan.dtypes[0]
    return PlannedPool(
        kv_cache_dtype=d.kv_cache_dtype, pool_tokens=d.pool_tokens, block_size=d.block_size,
        pages_per_request=d.pages_per_request, bytes_per_block=d.bytes_per_block,
        max_model_len=plan.setup.max_model_len, kv_bytes=plan.budget.kv_bytes, budget_exact=plan.budget.exact,
    )


def _pool_thresholds(cfg: ReleaseConfig, model_dir: Path | None) -> tuple[int, int, str, PlannedPool | None, str | None]:
    """(floor, target, from, plan, plan error). Typed kv_cache.pool_gate_* win; the rest come from the
    plan: target = the planned pool, floor = the planned pool less a margin for the budget's estimates."""
    kv, srv = cfg.kv_cache, cfg.server
    try:
        plan, error = planned_pool(cfg, model_dir=model_dir), None
    except BuilderError as exc:
        plan, error = None, exc.message
    if kv.pool_gate_floor_tokens and kv.pool_gate_target_tokens:
        return kv.pool_gate_floor_tokens, kv.pool_gate_target_tokens, "target file", plan, error
    if plan is None:
        raise ConfigError(
            f"target {cfg.target.name}: the kv_pool gate's floor/target are not set and the planner cannot "
            f"derive them: {error}",
            hint="set kv_cache.pool_gate_floor_tokens and pool_gate_target_tokens, or make `builder plan` work "
            "for this target",
        )
    margin = KV_POOL_FLOOR_MARGIN_EXACT if plan.budget_exact else KV_POOL_FLOOR_MARGIN_ESTIMATED
    floor = kv.pool_gate_floor_tokens or max(srv.max_model_len, int(plan.pool_tokens * (1 - margin)))
    target = kv.pool_gate_target_tokens or max(floor, plan.pool_tokens)
    source = "planner" if not (kv.pool_gate_floor_tokens or kv.pool_gate_target_tokens) else "target file and planner"
    return floor, target, source, plan, error


def gate_settings(cfg: ReleaseConfig, *, model_dir: Path | None = None) -> GateSettings:
    """Resolve a config's gate settings. Unset KV pool bounds come from builder.plan (planned from
    `model_dir`'s config.json when the served snapshot is at hand)."""
    g, srv = cfg.gates, cfg.server
    expectations = g.expectations or cfg.model.served_name
    if not (EXPECTATIONS_DIR / f"{expectations}.toml").is_file():
        raise ConfigError(
            f"target {cfg.target.name}: no gate expectation file {expectations}.toml for model "
            f"{cfg.model.served_name}",
            hint=f"set gates.expectations to one of {sorted(p.stem for p in EXPECTATIONS_DIR.glob('*.toml'))} "
            f"or add builder/measure/expectations/{expectations}.toml",
        )
    floor, target, source, plan, error = _pool_thresholds(cfg, model_dir)
    return GateSettings(
        gates=g,
        expectations=expectations,
        needle_tokens=g.needle_tokens or min(NEEDLE_DEFAULT_TOKENS, srv.max_model_len - NEEDLE_CONTEXT_MARGIN),
        prefix_tokens=g.prefix_tokens or min(2048, srv.max_model_len // 2),
        kv_pool_floor_tokens=floor,
        kv_pool_target_tokens=target,
        kv_pool_thresholds_from=source,
        kv_pool_plan=plan,
        kv_pool_plan_error=error,
    )


class Probe(BaseModel):
    """One chat prompt at temperature 0 and the regex a correct answer matches."""

    model_config = ConfigDict(extra="forbid")

    name: str
    prompt: str
    expect: str = Field(description="Python regex searched in the answer")
    max_tokens: int = Field(48, gt=0)

    @field_validator("expect")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"expect is not a valid regex ({exc})") from exc
        return v


class BatteryBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="the evidence file the pass-set was copied from")
    passed: list[str]


class RecallTask(BaseModel):
    """A fact hidden in long filler and the question that recalls it; `{value}` is filled in."""

    model_config = ConfigDict(extra="forbid")

    fact: str
    question: str
    expect: str
    max_tokens: int = Field(32, gt=0)


JsonModeRule = Literal["complete", "prefix"]


class ApiSurfaceExpectations(BaseModel):
    model_config = ConfigDict(extra="forbid")

    json_mode: JsonModeRule = Field(
        "complete",
        description="complete: the JSON-mode answer must parse as a JSON object. prefix: a model that "
        "cannot close the object (random weights write whitespace until max_tokens) passes if its answer, "
        "cut with finish_reason 'length', is the start of a JSON object: the grammar held",
    )


class Expectations(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    api_surface: ApiSurfaceExpectations = ApiSurfaceExpectations()
    golden: list[Probe] = Field(min_length=1)
    battery: list[Probe] = Field(min_length=1)
    battery_baseline: BatteryBaseline | None = None
    determinism_prompt: str
    needle: RecallTask
    prefix_cache: RecallTask

    @model_validator(mode="after")
    def _baseline_names(self) -> Expectations:
        if self.battery_baseline:
            unknown = set(self.battery_baseline.passed) - {p.name for p in self.battery}
            if unknown:
                raise ValueError(f"battery_baseline.passed names tasks not in battery: {sorted(unknown)}")
        return self


def load_expectations(name: str, *, directory: Path = EXPECTATIONS_DIR) -> Expectations:
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.toml"))
        raise ConfigError(f"gates.expectations = {name!r}: no file {path}", hint=f"use one of {known}")
    try:
        return Expectations.model_validate(tomllib.loads(path.read_text()))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ConfigError(f"{path} is invalid: {exc}", hint="fix the expectation file") from exc

"""The planner held to every recorded pool: evidence/plan/measured-pools.toml.

Each run names its target, the model facts and the settings it was measured under, and how its
KV budget is known: the target's own (exact on CPU), pinned, or solved from one dtype's pool
when the run did not report it (the other dtypes are then predictions).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builder.config import load_target
from builder.constants import EVIDENCE_DIR, REPO_ROOT
from builder.errors import ConfigError
from builder.plan.architecture import BudgetEstimates, architecture_file_path, load_architecture_file, load_model_dir
from builder.plan.budget import GIB, kv_budget
from builder.plan.capacity import blocks_for_pool, plan_dtype, serving_setup
from builder.plan.layout import load_layout

MEASURED_POOLS = EVIDENCE_DIR / "plan" / "measured-pools.toml"


class RecordedPool(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_cache_dtype: str
    label: str | None = None
    tokens: int | None = Field(default=None, gt=0, description="The recorded pool (or the low end of a range).")
    tokens_high: int | None = Field(default=None, gt=0, description="High end when the source gives a range.")
    block_size: int | None = Field(default=None, gt=0, description="Recorded attention block size, when known.")
    evidence: str | None = Field(default=None, description="A kv_pool gate file to read the pool from instead.")


class RecordedRun(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    engine: str
    source: str
    target: str
    config: str | None = Field(default=None, description="A model dir whose config.json replaces the architecture file.")
    max_model_len: int | None = None
    prefix_caching: bool | None = None
    num_speculative_tokens: int | None = None
    budget: Literal["target", "pinned", "solve"]
    kv_memory_gib: float | None = None
    solve_from: str | None = None
    tolerance: float | None = Field(default=None, ge=0, description="Allowed |planned/measured - 1|, when the run is one we model.")
    pool: list[RecordedPool]


class PoolCheck(BaseModel):
    """One recorded pool next to the planner's."""

    model_config = ConfigDict(frozen=True)

    run: str
    engine: str
    source: str
    kv_cache_dtype: str
    label: str
    measured_tokens: int
    measured_tokens_high: int | None
    measured_block_size: int | None
    planned_tokens: int
    planned_tokens_high: int | None = Field(description="When the budget is only known as a byte range (solved).")
    planned_block_size: int
    kv_bytes: int
    kv_bytes_high: int | None
    budget: str
    used_to_solve_budget: bool
    tolerance: float | None

    @property
    def residual(self) -> float:
        """planned / measured - 1 between the nearest ends of the two ranges (0 when they overlap)."""
        m_lo, m_hi = self.measured_tokens, self.measured_tokens_high or self.measured_tokens
        p_lo, p_hi = self.planned_tokens, self.planned_tokens_high or self.planned_tokens
        if p_hi < m_lo:
            return p_hi / m_lo - 1
        if p_lo > m_hi:
            return p_lo / m_hi - 1
        return 0.0


def load_runs(path: Path = MEASURED_POOLS) -> list[RecordedRun]:
    try:
        data = tomllib.loads(path.read_text())
        return [RecordedRun.model_validate(r) for r in data.get("run", [])]
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ConfigError(f"{path}: {exc}", hint="fix the recorded-pool file") from exc


def _recorded(pool: RecordedPool) -> tuple[int, int | None]:
    """(tokens, block size) as recorded: inline, or from a kv_pool gate file's cache_config_info."""
    if pool.evidence is None:
        assert pool.tokens is not None, "a recorded pool needs tokens or evidence"
        return pool.tokens, pool.block_size
    observed = json.loads((REPO_ROOT / pool.evidence).read_text())["observed"]
    block = observed.get("cache_config_info", {}).get("block_size")
    return int(observed["kv_pool_tokens"]), int(block) if block else pool.block_size


def check_run(run: RecordedRun) -> list[PoolCheck]:
    cfg = load_target(run.target)
    if run.config is not None:
        arch = load_model_dir(REPO_ROOT / run.config)
        known = architecture_file_path(cfg.model.served_name).is_file()
        estimates = load_architecture_file(cfg.model.served_name).estimates if known else BudgetEstimates()
    else:
        arch_file = load_architecture_file(cfg.model.served_name)
        arch, estimates = arch_file.architecture, arch_file.estimates
    setup = serving_setup(cfg, arch, prefix_caching=run.prefix_caching)
    update = {k: v for k, v in (("max_model_len", run.max_model_len), ("num_speculative_tokens", run.num_speculative_tokens)) if v is not None}
    setup = setup.model_copy(update=update)
    layout = load_layout()
    recorded = {p.kv_cache_dtype: _recorded(p) for p in run.pool}
    measured = {d: tokens for d, (tokens, _) in recorded.items()}
    if run.budget == "solve":
        layout_only = plan_dtype(arch, setup, kv_cache_dtype=run.solve_from, kv_bytes=None, layout=layout)
        blocks, exact = blocks_for_pool(layout_only, tokens=measured[run.solve_from], max_model_len=setup.max_model_len)
        # Every budget in [blocks, blocks + 1) blocks reports that pool; predict for both ends.
        kv_bytes = blocks * layout_only.bytes_per_block
        basis = f"solved from the {run.solve_from} pool" + ("" if exact else " (nearest block count)")
        kv_bytes_high = (blocks + 1) * layout_only.bytes_per_block - 1
    elif run.budget == "pinned":
        assert run.kv_memory_gib is not None, "a pinned run needs kv_memory_gib"
        kv_bytes, basis = int(run.kv_memory_gib * GIB), f"pinned {run.kv_memory_gib:g} GiB"
        kv_bytes_high = None
    else:
        budget = kv_budget(cfg, estimates=estimates)
        kv_bytes, kv_bytes_high = budget.kv_bytes, None
        basis = "target (exact)" if budget.exact else "target (estimated: " + ", ".join(budget.uncertain_terms) + ")"
    checks = []
    for pool in run.pool:
        planned = plan_dtype(arch, setup, kv_cache_dtype=pool.kv_cache_dtype, kv_bytes=kv_bytes, layout=layout)
        high = (plan_dtype(arch, setup, kv_cache_dtype=pool.kv_cache_dtype, kv_bytes=kv_bytes_high, layout=layout).pool_tokens
                if kv_bytes_high is not None else None)
        checks.append(PoolCheck(
            run=run.name, engine=run.engine, source=run.source, kv_cache_dtype=pool.kv_cache_dtype,
            label=pool.label or pool.kv_cache_dtype, measured_tokens=measured[pool.kv_cache_dtype],
            measured_tokens_high=pool.tokens_high, measured_block_size=recorded[pool.kv_cache_dtype][1],
            planned_tokens=planned.pool_tokens, planned_tokens_high=high if high != planned.pool_tokens else None,
            planned_block_size=planned.block_size, kv_bytes=kv_bytes, kv_bytes_high=kv_bytes_high, budget=basis,
            used_to_solve_budget=run.budget == "solve" and pool.kv_cache_dtype == run.solve_from, tolerance=run.tolerance,
        ))
    return checks


def check_all(path: Path = MEASURED_POOLS) -> list[PoolCheck]:
    return [c for run in load_runs(path) for c in check_run(run)]

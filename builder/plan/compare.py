"""What a multi-host layout buys over the one-host target it grows from, per KV dtype."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from builder.config import ReleaseConfig, load_target
from builder.plan.budget import GIB
from builder.plan.capacity import plan_target
from builder.plan.models import CapacityPlan


class HostsRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    kv_cache_dtype: str
    configured: bool
    pool_tokens: tuple[int, int]
    sessions: tuple[int, int]

    @property
    def pool_ratio(self) -> float | None:
        return self.pool_tokens[1] / self.pool_tokens[0] if self.pool_tokens[0] else None


class HostsComparison(BaseModel):
    """(one host, this layout) pairs; the pool is what the server holds, the same on every GPU under TP."""

    model_config = ConfigDict(frozen=True)
    single_host: str
    target: str
    budget_gib: tuple[float, float]
    tensor_parallel: tuple[int, int]
    exact: bool
    scope: str = "per GPU"
    rows: list[HostsRow]


def compare_hosts(plan: CapacityPlan, single: CapacityPlan) -> HostsComparison:
    mine = {d.kv_cache_dtype: d for d in plan.dtypes}
    rows = [
        HostsRow(kv_cache_dtype=d.kv_cache_dtype, configured=mine[d.kv_cache_dtype].configured,
                 pool_tokens=(d.pool_tokens, mine[d.kv_cache_dtype].pool_tokens),
                 sessions=(d.sessions, mine[d.kv_cache_dtype].sessions))
        for d in single.dtypes if d.kv_cache_dtype in mine
    ]
    return HostsComparison(
        single_host=single.target, target=plan.target,
        budget_gib=(single.budget.kv_bytes / GIB, plan.budget.kv_bytes / GIB),
        tensor_parallel=(single.setup.tensor_parallel_size, plan.setup.tensor_parallel_size),
        exact=single.budget.exact and plan.budget.exact,
        scope="per GPU" if plan.setup.on_gpu else "per host",
        rows=rows,
    )


def plan_against_single_host(cfg: ReleaseConfig, plan: CapacityPlan, **options) -> HostsComparison | None:
    """The comparison with cluster.single_host planned the same way (``options`` as plan_target's); None without one."""
    name = cfg.cluster.single_host
    if name is None:
        return None
    return compare_hosts(plan, plan_target(load_target(name), **options))

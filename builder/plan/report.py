"""`builder plan` output: rich tables for people, JSON for tools."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from builder.plan.budget import GIB
from builder.plan.compare import HostsComparison
from builder.plan.models import CapacityPlan


def _gib(n: float) -> str:
    return f"{n / GIB:,.2f}"


def _bytes(n: float) -> str:
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"


def dtype_table(plan: CapacityPlan) -> Table:
    s = plan.setup
    table = Table(title=f"KV capacity per GPU: {plan.model} on {plan.target} (TP {s.tensor_parallel_size}, "
                        f"max_model_len {s.max_model_len:,}, MTP k={s.num_speculative_tokens})")
    for col in ("KV dtype", "B/token/layer", "scales", "B/token all", "block", "B/block", "blocks/req", "pool tokens",
                "sessions"):
        table.add_column(col, justify="left" if col == "KV dtype" else "right", overflow="fold")
    for d in plan.dtypes:
        name = f"{d.kv_cache_dtype} *" if d.configured else d.kv_cache_dtype
        table.add_row(name, _bytes(d.kv_bytes_per_token_per_layer), _bytes(d.scale_bytes_per_token_per_layer),
                      _bytes(d.attention_bytes_per_token), f"{d.block_size:,}", f"{d.bytes_per_block:,}",
                      f"{d.pages_per_request:,}", f"{d.pool_tokens:,}", f"{d.sessions:,}")
    table.caption = (
        f"per GPU; * the configured dtype. B/token/layer: K+V (+ int8 scales) of one attention layer; B/token all: "
        f"every attention-layer cache ({plan.dtypes[0].attention_layers if plan.dtypes else 0} layers, indexer keys "
        f"included); blocks/req: blocks one request at max_model_len holds; sessions: whole requests at max_model_len. "
        f"Computed by builder.plan."
    )
    return table


def budget_table(plan: CapacityPlan) -> Table:
    table = Table(title=f"KV budget per GPU: {_gib(plan.budget.kv_bytes)} GiB")
    for col in ("term", "GiB", "basis", "source"):
        table.add_column(col, justify="right" if col == "GiB" else "left")
    for t in plan.budget.terms:
        table.add_row(t.name, _gib(t.bytes), t.basis, t.source)
    return table


def plan_renderable(plan: CapacityPlan) -> Group:
    notes = [Text(f"- {n}") for n in plan.notes]
    return Group(budget_table(plan), dtype_table(plan), Text(f"model facts: {plan.architecture_source}"), *notes)


def plan_json(plan: CapacityPlan) -> str:
    return plan.model_dump_json(indent=2) + "\n"


def hosts_table(cmp: HostsComparison) -> Table:
    b, t = cmp.budget_gib
    table = Table(title=f"What {cmp.target} buys over {cmp.single_host}: KV budget {cmp.scope} {b:,.2f} -> {t:,.2f} GiB "
                        f"(TP {cmp.tensor_parallel[0]} -> {cmp.tensor_parallel[1]})")
    for col in ("KV dtype", f"pool {cmp.single_host}", f"pool {cmp.target}", "x", f"sessions {cmp.single_host}",
                f"sessions {cmp.target}"):
        table.add_column(col, justify="left" if col == "KV dtype" else "right")
    for r in cmp.rows:
        ratio = f"{r.pool_ratio:.2f}x" if r.pool_ratio else "-"
        table.add_row(f"{r.kv_cache_dtype} *" if r.configured else r.kv_cache_dtype, f"{r.pool_tokens[0]:,}",
                      f"{r.pool_tokens[1]:,}", ratio, f"{r.sessions[0]:,}", f"{r.sessions[1]:,}")
    table.caption = ("pool: tokens the server holds at max_model_len (under TP every GPU holds its share of each "
                     "token); sessions: whole requests at max_model_len. Computed by builder.plan"
                     + ("" if cmp.exact else ", on estimated or assumed budget terms") + ".")
    return table

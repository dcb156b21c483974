"""Every validation rule has a failing case whose message names the field and the fix."""

from __future__ import annotations

import json

import pytest

from builder.config import launch_plan, load_target, parse_config, require_pinned_base
from builder.config.ple import PLE_TABLE_DIR_ENV
from builder.errors import ConfigError, ImagePinError


def _set(d: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        d = d.setdefault(p, {})
    if value is _DELETE:
        d.pop(leaf, None)
    else:
        d[leaf] = value


_DELETE = object()

RULES = [
    # (base target, {field: value}, substrings the message must contain)
    ("gb10", {"engine.profile": "vllm-fork-preview"}, ["kv_cache.dtype", "int8 patch set", "Fix:"]),
    ("gb10", {"engine.profile": "vllm-fork-preview", "kv_cache.dtype": "fp8_e4m3", "kv_cache.scale_layout": _DELETE},
     ["patches.apply", "no patch series", "set patches.apply = false"]),
    ("gb10", {"kv_cache.scale_layout": "inline"}, ["kv_cache.scale_layout", "128-byte aligned", "side"]),
    ("gb10", {"patches.apply": False, "patches.reason": "x"}, ["patches.apply", "set patches.apply = true"]),
    ("gb10", {"ple.mmap_table": False}, ["ple.mmap_table", "135 GiB", "set ple.mmap_table = true"]),
    ("gb10", {"ple.cpu_offload": False}, ["ple.cpu_offload", "file mapping", "set ple.cpu_offload = true"]),
    ("gb10", {"speculative.num_speculative_tokens": 5}, ["speculative.num_speculative_tokens", "outside 1..4", "ring"]),
    ("gb10", {"speculative.num_speculative_tokens": 0}, ["speculative.num_speculative_tokens", "outside 1..4"]),
    ("gb10", {"parallel.tensor_parallel_size": 2}, ["parallel.tensor_parallel_size", "larger than target.gpu_count"]),
    ("h200", {"parallel.pipeline_parallel_size": 2}, ["TP x PP = 2"]),
    ("cmp170hx-x2", {"parallel.tensor_parallel_size": 1}, ["parallel.enable_expert_parallel", "tensor_parallel_size > 1"]),
    ("gb10", {"parallel.distributed_executor_backend": _DELETE}, ["parallel.distributed_executor_backend", "silent", '"mp"']),
    ("gb10-x2", {"parallel.distributed_executor_backend": "mp"}, ["parallel.distributed_executor_backend", "cannot span hosts", '"ray"']),
    ("gb10-x2", {"parallel.tensor_parallel_size": 1, "parallel.enable_expert_parallel": False},
     ["parallel.tensor_parallel_size", "leaves hosts idle", "= 2"]),
    ("gb10-x2", {"parallel.tensor_parallel_size": 4}, ["TP x PP = 4", "x cluster.nodes = 2"]),
    ("cpu-smoke-x2", {"cluster.ray_port": 8000}, ["cluster.ray_port", "overlap", "its own port"]),
    ("cpu-smoke-x2", {"cluster.node_manager_port": 10050}, ["cluster.ray_port", "worker range", "its own port"]),
    ("cpu-smoke-x2", {"cluster.min_worker_port": 20000}, ["cluster.max_worker_port", "below min_worker_port"]),
    ("cpu-smoke-x2", {"cluster.interface": "eth0; rm -rf /"}, ["cluster.interface"]),
    ("gb10", {"server.max_model_len": 300000}, ["server.max_model_len", "262144", "allow_long_max_model_len"]),
    ("gb10", {"target.base_image": "vllm/vllm-openai:qwen38-flash-next-amd64-cu130"},
     ["target.base_image", "amd64", "linux/arm64"]),
    ("cmp170hx-x2", {"target.base_image_arch": "arm64"}, ["target.base_image", "arm64", "linux/amd64"]),
    ("gb10", {"target.cuda": "12.8"}, ["target.cuda", "sm_121", "12.9"]),
    ("gb10", {"kv_cache.pool_gate_target_tokens": 1}, ["kv_cache.pool_gate_target_tokens", "below floor"]),
    ("gb10", {"server.prot": 1}, ["server.prot", "unknown key"]),
    ("gb10", {"typo_section.x": 1}, ["typo_section", "unknown key"]),
    ("gb10", {"kv_cache.dtype": "int4"}, ["kv_cache.dtype"]),
    # the engine base: one source per target, and a lock only for the engine and platform it was resolved for
    ("h200", {"target.base_source": "wheel-lock", "target.base_lock": _DELETE},
     ["target.base_lock", "no lock is named", "docker/locks/vllm-0.33.0-linux-amd64.txt", "builder pin --target h200"]),
    ("gb10", {"target.base_source": "wheel-lock", "target.base_lock": "docker/locks/vllm-0.33.0-linux-amd64.txt"},
     ["target.base_lock", "not the vllm 0.33.0 lock for linux/arm64", "docker/locks/vllm-0.33.0-linux-arm64.txt"]),
    ("h200", {"target.base_source": "image", "target.base_lock": "docker/locks/vllm-0.33.0-linux-amd64.txt"},
     ["target.base_lock", "would be ignored", 'base_source = "wheel-lock"']),
    ("h200", {"target.base_source": "pypi"}, ["target.base_source"]),
    ("h200", {"target.base_lock": "docker/locks/vllm-0.33.0-linux-amd64.txt@sha256:short"}, ["target.base_lock"]),
    ("gb10", {"engine.profile": "vllm-fork-preview", "kv_cache.dtype": "fp8_e4m3", "kv_cache.scale_layout": _DELETE,
              "patches.apply": False, "patches.reason": "x"},
     ["target.base_source", "has no wheel lock", 'base_source = "image"']),
]


@pytest.mark.parametrize(("base", "changes", "expect"), RULES, ids=[f"{b}:{','.join(c)}" for b, c, _ in RULES])
def test_rule_rejects_with_field_and_fix(target_data, base, changes, expect):
    data = target_data(base)
    for field, value in changes.items():
        _set(data, field, value)
    with pytest.raises(ConfigError) as exc:
        parse_config(data, source=f"{base}.toml")
    text = str(exc.value)
    for s in expect:
        assert s in text, f"{s!r} missing from: {text}"


@pytest.mark.parametrize("name", ["gb10", "cmp170hx-x2", "h200"])
def test_shipped_targets_load(name):
    cfg = load_target(name)
    assert cfg.target.name == name


def test_allow_long_context_when_asked(target_data):
    data = target_data("gb10")
    _set(data, "server.max_model_len", 300000)
    _set(data, "server.allow_long_max_model_len", True)
    cfg = parse_config(data, source="x")
    assert ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1") in [(e.name, e.value) for e in launch_plan(cfg).env]


def test_unknown_target_lists_available():
    with pytest.raises(ConfigError) as exc:
        load_target("gb11")
    assert "gb10" in str(exc.value) and "not found" in str(exc.value)


def test_build_refuses_base_image_without_digest(target_data):
    data = target_data("gb10")
    _set(data, "target.base_source", "image")
    _set(data, "target.base_lock", _DELETE)
    _set(data, "target.base_image", "vllm/vllm-openai:v0.33.0")
    with pytest.raises(ImagePinError) as exc:
        require_pinned_base(parse_config(data, source="x"))
    text = str(exc.value)
    assert "target.base_image" in text and "no @sha256: digest" in text and "builder pin --target gb10" in text
    assert 'base_source = "wheel-lock"' in text  # the way out when no registry is reachable
    _set(data, "target.base_image", "vllm/vllm-openai:v0.33.0@sha256:" + "a" * 64)
    assert require_pinned_base(parse_config(data, source="x")).endswith("a" * 64)


def test_build_refuses_lock_without_digest(target_data):
    data = target_data("h200")
    _set(data, "target.base_source", "wheel-lock")
    _set(data, "target.base_lock", "docker/locks/vllm-0.33.0-linux-amd64.txt")
    with pytest.raises(ImagePinError) as exc:
        require_pinned_base(parse_config(data, source="x"))
    text = str(exc.value)
    assert "target.base_lock" in text and "no @sha256: digest" in text and "builder pin --target h200" in text
    _set(data, "target.base_lock", "docker/locks/vllm-0.33.0-linux-amd64.txt@sha256:" + "b" * 64)
    assert require_pinned_base(parse_config(data, source="x")) == "docker/locks/vllm-0.33.0-linux-amd64.txt@sha256:" + "b" * 64


def test_ple_spelling_follows_engine(target_data):
    """Upstream reads PLE from the engram config; the fork preview reads VLLM_PLE_* env vars."""
    upstream = launch_plan(load_target("gb10"))
    assert ("--engram-config", '{"cpu_offload":true,"mmap_table":true}') in [(f.flag, f.value) for f in upstream.flags]
    assert ("VLLM_ENGINE_READY_TIMEOUT_S", "1800") in [(e.name, e.value) for e in upstream.env]
    assert not any(e.name.startswith("VLLM_PLE_") for e in upstream.env)

    data = target_data("gb10")
    _set(data, "engine.profile", "vllm-fork-preview")
    _set(data, "target.base_source", "image")  # the fork preview has no wheel lock
    _set(data, "target.base_lock", _DELETE)
    _set(data, "kv_cache.dtype", "fp8_e4m3")
    _set(data, "kv_cache.scale_layout", _DELETE)
    _set(data, "patches.apply", False)
    _set(data, "patches.reason", "the fork preview has no int8 series")
    fork = launch_plan(parse_config(data, source="x"))
    env = {e.name: e.value for e in fork.env}
    assert env["VLLM_PLE_CPU_OFFLOAD"] == "1" and env["VLLM_PLE_MMAP_TABLE"] == "1"
    assert env["VLLM_PLE_OFFLOAD_READY_TIMEOUT"] == "1800"
    assert not any(f.flag == "--engram-config" for f in fork.flags)
    assert [r.env for r in fork.required] == ["MODEL_DIR"]
    assert fork.warnings == []


def _engram(plan) -> dict:
    return json.loads(next(f.value for f in plan.flags if f.flag == "--engram-config"))


@pytest.mark.parametrize("name", ["gb10", "cmp170hx-x2", "h200"])
def test_series_with_ple_mmap_maps_the_table_on_every_gpu_target(name):
    """The ple-mmap patch in the series turns mmap on: no out-of-host-memory gap, and the table-file
    directory becomes a launch input."""
    plan = launch_plan(load_target(name))
    assert _engram(plan) == {"cpu_offload": True, "mmap_table": True}
    assert plan.warnings == []
    table_dir = [r for r in plan.required if r.env == PLE_TABLE_DIR_ENV]
    assert len(table_dir) == 1 and table_dir[0].is_dir and table_dir[0].writable
    flag = next(f for f in plan.flags if f.flag == "--engram-config")
    assert "page cache" in flag.why and PLE_TABLE_DIR_ENV in flag.why


def test_series_without_ple_mmap_keeps_the_known_gap():
    """Control: the same target against a series that lacks the patch pins the table and says so."""
    plan = launch_plan(load_target("gb10"), series={"qsa-int8"})
    assert _engram(plan) == {"cpu_offload": True}
    assert [r.env for r in plan.required] == ["MODEL_DIR"]
    assert any("Expect the model load to run out of host memory" in w for w in plan.warnings)


def test_target_that_skips_the_series_cannot_map(target_data):
    data = target_data("gb10")
    _set(data, "kv_cache.dtype", "fp8_e4m3")
    _set(data, "kv_cache.scale_layout", _DELETE)
    _set(data, "patches.apply", False)
    _set(data, "patches.reason", "fp8 only")
    plan = launch_plan(parse_config(data, source="x"))
    assert _engram(plan) == {"cpu_offload": True}
    assert any("lacks ple-mmap" in w for w in plan.warnings)


def test_big_host_pins_without_a_table_dir(target_data):
    data = target_data("h200")
    _set(data, "target.host_ram_gib", 256)
    _set(data, "ple.mmap_table", False)
    plan = launch_plan(parse_config(data, source="x"))
    assert _engram(plan) == {"cpu_offload": True}
    assert [r.env for r in plan.required] == ["MODEL_DIR"] and plan.warnings == []

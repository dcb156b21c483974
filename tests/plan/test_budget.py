"""The KV budget term by term, and the weights a snapshot puts on the GPU (from real safetensors headers)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from builder.config import load_target, parse_config
from builder.errors import ConfigError
from builder.plan.architecture import load_architecture_file
from builder.plan.budget import GIB, kv_budget
from builder.plan.weights import snapshot_weights

ESTIMATES = load_architecture_file("qwen3.8-flash-next").estimates


def test_cpu_budget_is_the_kv_space_env_and_exact():
    b = kv_budget(load_target("cpu-smoke"), estimates=ESTIMATES)
    assert b.kv_bytes == 2 * GIB and b.exact and [t.basis for t in b.terms] == ["config"]


def test_cpu_budget_without_the_env_names_the_field(target_data):
    data = target_data("cpu-smoke")
    del data["server"]["extra_env"]["VLLM_CPU_KVCACHE_SPACE"]
    with pytest.raises(ConfigError, match="server.extra_env.VLLM_CPU_KVCACHE_SPACE"):
        kv_budget(parse_config(data, source="t"), estimates=ESTIMATES)


def test_gpu_budget_terms_say_what_is_configured_estimated_or_assumed():
    b = kv_budget(load_target("cmp170hx-x2"), estimates=ESTIMATES)
    assert [(t.name, t.basis) for t in b.terms] == [
        ("GPU memory x utilization", "config"), ("weights on this GPU", "estimated"),
        ("activation peak + non-torch", "assumed"), ("CUDA graphs", "assumed")]
    assert b.terms[0].bytes == int(64 * GIB * 0.9)
    assert b.terms[1].bytes == -(ESTIMATES.gpu_weight_bytes.bytes // 2)  # TP2
    assert b.kv_bytes == sum(t.bytes for t in b.terms) and not b.exact


def test_eager_drops_the_cuda_graph_term_and_a_pinned_budget_is_all_there_is(target_data):
    data = target_data("h200")
    data["server"]["enforce_eager"] = True
    b = kv_budget(parse_config(data, source="t"), estimates=ESTIMATES)
    graphs = next(t for t in b.terms if t.name == "CUDA graphs")
    assert (graphs.bytes, graphs.basis) == (0, "config")
    pinned = kv_budget(load_target("gb10"), estimates=ESTIMATES, kv_memory_gib=13.75)
    assert pinned.kv_bytes == int(13.75 * GIB) and pinned.exact


@pytest.mark.parametrize("args", [["--kv-cache-memory-bytes", "25769803776"], ["--kv-cache-memory-bytes=25769803776"]])
def test_a_target_that_pins_kv_bytes_in_its_launch_needs_no_estimates(target_data, args):
    """vLLM sizes the cache from --kv-cache-memory-bytes alone; the weights no longer matter."""
    from builder.plan.architecture import BudgetEstimates

    data = target_data("h200")
    data["server"]["extra_args"] = ["--max-num-seqs", "8", *args]
    b = kv_budget(parse_config(data, source="t"), estimates=BudgetEstimates())
    assert b.kv_bytes == 24 * GIB and b.exact and [t.basis for t in b.terms] == ["config"]
    assert "server.extra_args" in b.terms[0].source
    # The planner's own override still wins over the launch.
    assert kv_budget(parse_config(data, source="t"), estimates=ESTIMATES, kv_memory_gib=2).kv_bytes == 2 * GIB


@pytest.mark.parametrize("args", [["--kv-cache-memory-bytes"], ["--kv-cache-memory-bytes", "24GiB"],
                                  ["--kv-cache-memory-bytes=0"]])
def test_a_malformed_kv_bytes_pin_names_the_field(target_data, args):
    data = target_data("h200")
    data["server"]["extra_args"] = args
    with pytest.raises(ConfigError, match="server.extra_args: --kv-cache-memory-bytes"):
        kv_budget(parse_config(data, source="t"), estimates=ESTIMATES)


def test_gpu_budget_without_an_estimate_says_how_to_fix_it():
    from builder.plan.architecture import BudgetEstimates

    with pytest.raises(ConfigError, match=r"\[estimates.gpu_weight_bytes\].*--kv-memory-gib"):
        kv_budget(load_target("h200"), estimates=BudgetEstimates())


def _snapshot(tmp_path):
    save_file({"model.layers.0.mlp.experts.w": torch.zeros(100, 100, dtype=torch.int8),
               "model.layers.0.ple.ple_embedding.ngram_embedding.weight": torch.zeros(50, 10, dtype=torch.bfloat16)},
              str(tmp_path / "model-00001.safetensors"))
    save_file({"lm_head.weight": torch.zeros(10, 10, dtype=torch.float32)}, str(tmp_path / "model-00002.safetensors"))
    return tmp_path


def test_snapshot_weights_come_from_safetensors_headers_and_leave_ple_tables_on_the_host(tmp_path):
    snap = _snapshot(tmp_path)
    offload = snapshot_weights(snap, ple_offload=True)
    assert (offload.gpu_bytes, offload.host_bytes, offload.files) == (10_000 + 400, 1_000, 2)
    assert snapshot_weights(snap, ple_offload=False).gpu_bytes == 11_400


def test_snapshot_weights_replace_the_estimate(tmp_path):
    snap = _snapshot(tmp_path)
    b = kv_budget(load_target("cmp170hx-x2"), estimates=ESTIMATES, snapshot_weight_bytes=10_400, snapshot_source=str(snap))
    weights = next(t for t in b.terms if t.name == "weights on this GPU")
    assert (weights.bytes, weights.basis) == (-5_200, "snapshot")


def test_a_broken_safetensors_file_is_a_config_error(tmp_path):
    (tmp_path / "bad.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    with pytest.raises(ConfigError, match="implausible"):
        snapshot_weights(tmp_path, ple_offload=True)
    (tmp_path / "bad.safetensors").write_bytes((4).to_bytes(8, "little") + b"nope")
    with pytest.raises(ConfigError, match="not JSON"):
        snapshot_weights(tmp_path, ple_offload=True)


def test_plan_from_a_snapshot_uses_its_config_and_its_weights(tmp_path):
    import shutil
    from pathlib import Path

    from builder.plan import plan_target

    snap = _snapshot(tmp_path)
    shutil.copy(Path(__file__).parent / "fixtures" / "qwen4-exp-synthetic" / "config.json", snap / "config.json")
    plan = plan_target(load_target("h200"), model_dir=snap)
    assert plan.architecture_source.endswith("config.json") and plan.dtypes[0].attention_layers == 2 + 1  # + MTP
    weights = next(t for t in plan.budget.terms if t.name == "weights on this GPU")
    assert (weights.bytes, weights.basis) == (-10_400, "snapshot")  # the PLE table stays on the host

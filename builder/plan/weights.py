"""Weight bytes a snapshot puts on the GPUs, read from its safetensors headers (no tensor is loaded).

With PLE CPU offload the n-gram embedding tables stay in host memory, so their tensors are
left out.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from builder.errors import ConfigError

#: Tensor-name fragment of the PLE n-gram tables (transformers' Qwen4Exp tp plan: ple.ple_embedding.ngram_embedding).
HOST_RESIDENT_WITH_PLE_OFFLOAD = "ngram_embedding"
_MAX_HEADER = 100 * 1024 * 1024


class SnapshotWeights(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu_bytes: int
    host_bytes: int
    files: int


def _header(path: Path) -> dict:
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ConfigError(f"{path}: too short for a safetensors file", hint="re-download the snapshot")
        (size,) = struct.unpack("<Q", raw)
        if size > _MAX_HEADER:
            raise ConfigError(f"{path}: safetensors header of {size} bytes is implausible", hint="re-download the snapshot")
        try:
            header = json.loads(fh.read(size))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: safetensors header is not JSON: {exc}", hint="re-download the snapshot") from exc
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: safetensors header is not a JSON object", hint="re-download the snapshot")
    return header


def snapshot_weights(model_dir: Path, *, ple_offload: bool) -> SnapshotWeights:
    """Sum of tensor bytes over every *.safetensors file, split into GPU- and host-resident."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"--model-dir {model_dir}: no *.safetensors files", hint="point it at a safetensors snapshot")
    gpu = host = 0
    for path in files:
        for name, info in _header(path).items():
            if name == "__metadata__":
                continue
            try:
                start, end = info["data_offsets"]
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"{path}: tensor {name} has no data_offsets", hint="re-download the snapshot") from exc
            if ple_offload and HOST_RESIDENT_WITH_PLE_OFFLOAD in name:
                host += end - start
            else:
                gpu += end - start
    return SnapshotWeights(gpu_bytes=gpu, host_bytes=host, files=len(files))

"""The evidence contract: what gates and benchmarks write, and what bundle and publish read."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builder.errors import MeasureError
from builder.redact import redact, redact_data


class ServerInfo(BaseModel):
    """The endpoint a measurement ran against, as it described itself."""

    model_config = ConfigDict(extra="allow")

    url: str
    served_model: str
    max_model_len: int
    version: str = Field(description="vLLM version from GET /version.")
    kv_cache_dtype: str | None = Field(default=None, description="cache_dtype label of vllm:cache_config_info.")
    kv_pool_tokens: int | None = Field(default=None, description="KV pool size in tokens from /metrics.")


class GateEvidence(BaseModel):
    """One gate's verdict with everything needed to re-check it: evidence/<target>/<gate>.json."""

    model_config = ConfigDict(extra="allow")

    gate: str = Field(description="Gate name, e.g. golden_probes, needle, kv_pool.")
    required: bool = Field(description="A failed required gate blocks publishing.")
    verdict: Literal["pass", "fail"]
    summary: str = Field(default="", description="One line for the model card, e.g. '3/3' or 'HIT (7,900 tokens)'.")
    thresholds: dict[str, Any] = Field(default_factory=dict)
    records: list[dict[str, Any]] = Field(default_factory=list, description="Raw requests and responses.")
    server_version: str | None = None
    config_digest: str | None = None
    created: datetime
    # Added by measure (optional, so older files still load):
    observed: dict[str, Any] = Field(default_factory=dict, description="What the gate measured.")
    server: ServerInfo | None = Field(default=None, description="The endpoint the gate ran against.")
    target: str | None = Field(default=None, description="Target name whose config the server was launched from.")


class BenchEvidence(BaseModel):
    """evidence/<target>/bench-<workload>.json: `vllm bench serve` keys plus their context.

    Only the keys the README and publish read are typed; every other vLLM key (mean/median/std/
    p50/p90/p95/p99 of ttft, tpot, itl, e2el) is kept as an extra field.
    """

    model_config = ConfigDict(extra="allow")

    workload: str
    kind: str
    input_len: int
    output_len: int
    num_prompts: int
    concurrency: int
    completed: int
    failed: int
    duration: float
    output_throughput: float
    request_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    mean_e2el_ms: float
    server: ServerInfo
    config_digest: str | None = None
    target: str | None = None
    created: datetime


def now() -> datetime:
    return datetime.now(timezone.utc)


def write_json_atomic(path: Path, data: BaseModel | dict[str, Any]) -> Path:
    """Write to a temp file beside `path`, then rename into place; the API key redacted.

    Server answers land in evidence whole (an error body may echo the request's Authorization
    header), so every string is redacted: on the data, where the key is found however JSON escapes it."""
    plain = json.loads(data.model_dump_json()) if isinstance(data, BaseModel) else json.loads(json.dumps(data, default=str))
    return write_bytes_atomic(path, (json.dumps(redact_data(plain), indent=2, ensure_ascii=False) + "\n").encode())


def write_text_atomic(path: Path, text: str) -> Path:
    """A text file (markdown) written like write_json_atomic, the API key redacted."""
    return write_bytes_atomic(path, redact(text).encode())


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Bytes as given (a chart): text goes through write_text_atomic or write_json_atomic."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; evidence is committed and shipped
    os.replace(tmp, path)
    return path


def load_bench_evidence(directory: Path) -> list[BenchEvidence]:
    """Every bench-*.json in `directory`, sorted by file name."""
    out = []
    for path in sorted(directory.glob("bench-*.json")):
        try:
            out.append(BenchEvidence.model_validate_json(path.read_bytes()))
        except ValidationError as exc:
            raise MeasureError(f"{path}: not a benchmark evidence file: {exc}", hint="re-run `builder bench`") from exc
    return out


GATE_PREFIX_EXCLUDE = ("bench",)


def load_gate_evidence(directory: Path) -> list[GateEvidence]:
    """Every gate file in a target's evidence dir (benchmark files are not gates), sorted by gate."""
    out = []
    for path in sorted(directory.glob("*.json")):
        if path.name.startswith(GATE_PREFIX_EXCLUDE):
            continue
        try:
            data = json.loads(path.read_bytes())
        except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, or nested too deeply to parse
            raise MeasureError(f"{path}: not valid JSON: {exc}", hint="re-run `builder gates` to rewrite it") from None
        if not isinstance(data, dict) or "gate" not in data:
            continue
        try:
            out.append(GateEvidence.model_validate(data))
        except ValidationError as exc:
            raise MeasureError(f"{path}: not a gate evidence file: {exc}", hint="re-run `builder gates`") from exc
    return sorted(out, key=lambda g: g.gate)

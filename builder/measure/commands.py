"""The two CLI entry points: resolve a target's config into explicit gate/bench parameters."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from builder import config
from builder.constants import EVIDENCE_DIR
from builder.errors import MeasureError
from builder.measure.bench import run_ab, run_bench
from builder.measure.evidence import BenchEvidence, GateEvidence
from builder.measure.gates import run_gates
from builder.measure.settings import gate_settings


def _default_url(cfg: config.ReleaseConfig) -> str:
    return f"http://127.0.0.1:{cfg.server.port}"


def gates_command(
    *, target: str, url: str | None, out: Path | None, only: list[str] | None, server_log: Path | None = None,
) -> list[GateEvidence]:
    """`builder gates`: all (or `only`) gates against the target's server; raises GateFailed."""
    cfg = config.load_target(target)
    log = None
    if server_log is not None:
        try:
            log = server_log.read_text(errors="replace")
        except OSError as exc:
            raise MeasureError(f"--server-log {server_log}: {exc.strerror}", hint="pass a readable log file") from exc
    return run_gates(
        url=url or _default_url(cfg), target=cfg.target.name, settings=gate_settings(cfg),
        config_digest=config.config_digest(cfg), out_dir=out or EVIDENCE_DIR / cfg.target.name, only=only,
        server_log=log,
    )


class ABOptions(BaseModel):
    """`builder bench --ab-url`: the second endpoint and how to interleave."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url_b: str
    label_a: str = "A"
    label_b: str = "B"
    rounds: int = Field(6, ge=1)
    input_len: int = Field(2048, gt=0)
    output_len: int = Field(128, gt=1)
    background_streams: int = Field(1, ge=0)


def bench_command(
    *, target: str, url: str | None, out: Path | None, prefill_lens: list[int] | None,
    decode_output_len: int, concurrency_levels: list[int] | None, repeats: int, kinds: list[str] | None,
    ab: ABOptions | None = None,
) -> list[BenchEvidence] | dict:
    """`builder bench`: the standard workloads against the target's server, or with `ab` an
    interleaved A/B of that server (arm A) against a second endpoint (arm B)."""
    cfg = config.load_target(target)
    url = url or _default_url(cfg)
    out_dir = out or EVIDENCE_DIR / cfg.target.name
    if ab is not None:
        return run_ab(
            url_a=url, url_b=ab.url_b, label_a=ab.label_a, label_b=ab.label_b,
            out_dir=out_dir / f"ab-{ab.label_a}-vs-{ab.label_b}", rounds=ab.rounds, input_len=ab.input_len,
            output_len=ab.output_len, background_streams=ab.background_streams,
        )
    return run_bench(
        url=url, target=cfg.target.name, config_digest=config.config_digest(cfg),
        out_dir=out_dir, max_model_len=cfg.server.max_model_len,
        prefill_lens=prefill_lens, decode_output_len=decode_output_len,
        concurrency_levels=concurrency_levels, repeats=repeats, kinds=kinds,
    )

"""The two CLI entry points: check every option, then resolve a target's config into explicit
gate/bench parameters. No option is checked after a request is sent or a folder is made."""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builder import config
from builder.constants import EVIDENCE_DIR, GATE_NAMES
from builder.errors import MeasureError, ServeError
from builder.measure.bench import run_ab, run_bench
from builder.measure.client import standard_suite
from builder.measure.evidence import BenchEvidence, GateEvidence
from builder.measure.gates import run_gates
from builder.measure.settings import gate_settings
from builder.serve.wait import base_url

#: The workload kinds of the standard suite (its one definition), for --workload.
WORKLOAD_KINDS = tuple(dict.fromkeys(w.kind for w in standard_suite(4096)))
#: An A/B label names a folder (ab-<A>-vs-<B>): no separators, no leading dot.
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def _default_url(cfg: config.ReleaseConfig) -> str:
    return f"http://127.0.0.1:{cfg.server.port}"


def checked_url(url: str, *, option: str = "--url") -> str:
    """A base URL (http or https, a host, an optional port and path), or MeasureError naming `option`."""
    try:
        return base_url(url)
    except ServeError as exc:
        raise MeasureError(exc.message.replace("--url", option, 1),
                           hint=f"pass the server's base URL, e.g. {option} http://127.0.0.1:8000") from None


def checked_out_dir(path: Path, *, option: str = "--out") -> Path:
    """A folder evidence can be written into: an existing writable folder, or one mkdir can make.
    Nothing is created here; the first evidence file makes it."""
    hint = f"pass a writable folder to {option} (it is created when missing)"
    if path.exists():
        if not path.is_dir():
            raise MeasureError(f"{option} {path} exists and is not a folder", hint=hint)
        if not os.access(path, os.W_OK | os.X_OK):
            raise MeasureError(f"{option} {path} is not writable", hint=hint)
        return path
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is None or not parent.is_dir():
        raise MeasureError(f"{option} {path}: {parent} is not a folder, so {path} cannot be made", hint=hint)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise MeasureError(f"{option} {path} cannot be made: {parent} is not writable", hint=hint)
    return path


class GatesOptions(BaseModel):
    """`builder gates` options, checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    out: Path | None = None
    only: list[str] | None = None
    server_log: Path | None = None

    @classmethod
    def parse(cls, *, url: str | None, out: Path | None, only: list[str] | None, server_log: Path | None) -> GatesOptions:
        unknown = sorted(set(only or ()) - set(GATE_NAMES))
        if unknown:
            raise MeasureError(f"--only {', '.join(unknown)}: no such gate", hint=f"choose from {', '.join(GATE_NAMES)}")
        if server_log is not None and not server_log.is_file():
            raise MeasureError(f"--server-log {server_log} is not a file", hint="pass the server's startup log file")
        return cls(url=None if url is None else checked_url(url), out=None if out is None else checked_out_dir(out),
                   only=only or None, server_log=server_log)


def gates_command(
    *, target: str, url: str | None, out: Path | None, only: list[str] | None, server_log: Path | None = None,
) -> list[GateEvidence]:
    """`builder gates`: all (or `only`) gates against the target's server; raises GateFailed."""
    opts = GatesOptions.parse(url=url, out=out, only=only, server_log=server_log)
    cfg = config.load_target(target)
    out_dir = opts.out or checked_out_dir(EVIDENCE_DIR / cfg.target.name)
    log = None
    if opts.server_log is not None:
        try:
            log = opts.server_log.read_text(errors="replace")
        except OSError as exc:
            raise MeasureError(f"--server-log {opts.server_log}: {exc.strerror}", hint="pass a readable log file") from exc
    return run_gates(
        url=opts.url or _default_url(cfg), target=cfg.target.name, settings=gate_settings(cfg),
        config_digest=config.config_digest(cfg), out_dir=out_dir, only=opts.only, server_log=log,
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


#: ABOptions fields as `builder bench` spells them.
_AB_OPTIONS = {"url_b": "--ab-url", "rounds": "--ab-rounds", "input_len": "--ab-input-len",
               "output_len": "--ab-output-len", "background_streams": "--ab-background"}


class BenchOptions(BaseModel):
    """`builder bench` options, checked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    out: Path | None = None
    prefill_lens: list[int] | None = None
    decode_output_len: int = Field(512, gt=0)
    concurrency_levels: list[int] | None = None
    repeats: int = Field(3, ge=1)
    kinds: list[str] | None = None
    ab: ABOptions | None = None

    @classmethod
    def parse(
        cls, *, url: str | None, out: Path | None, prefill_lens: str | None, decode_output_len: int,
        concurrency: str | None, repeats: int, workload: list[str] | None, ab_url: str | None, ab_labels: str,
        ab_rounds: int, ab_input_len: int, ab_output_len: int, ab_background: int,
    ) -> BenchOptions:
        """From the command line's values; the first bad one raises MeasureError naming it."""
        unknown = sorted(set(workload or ()) - set(WORKLOAD_KINDS))
        if unknown:
            raise MeasureError(f"--workload {', '.join(unknown)}: no such workload kind",
                               hint=f"choose from {', '.join(WORKLOAD_KINDS)}")
        labels = ab_labels.split(",")
        if len(labels) != 2 or not all(_LABEL.fullmatch(label) for label in labels) or labels[0] == labels[1]:
            raise MeasureError(f"--ab-labels {ab_labels!r} is not two different labels separated by a comma",
                               hint="e.g. --ab-labels auto,fp8 (letters, digits, '_', '.', '+', '-'; each names a folder part)")
        if decode_output_len <= 0:
            raise MeasureError(f"--decode-output-len {decode_output_len} is not a positive token count", hint="e.g. --decode-output-len 512")
        levels = _int_list(concurrency, option="--concurrency")
        if levels is not None and (not levels or min(levels) < 1):
            raise MeasureError(f"--concurrency {concurrency!r}: every level must be 1 or more", hint="e.g. --concurrency 1,2,4,8")
        lens = _int_list(prefill_lens, option="--prefill-lens")
        ab = None
        if ab_url:
            try:
                ab = ABOptions(url_b=checked_url(ab_url, option="--ab-url"), label_a=labels[0], label_b=labels[1],
                               rounds=ab_rounds, input_len=ab_input_len, output_len=ab_output_len,
                               background_streams=ab_background)
            except ValidationError as exc:
                first = exc.errors()[0]
                field = str(first["loc"][0]) if first["loc"] else ""
                option = _AB_OPTIONS.get(field, field)
                raise MeasureError(f"{option} {first.get('input')!r}: {first['msg']}",
                                   hint="see `builder bench --help`") from None
        return cls(url=None if url is None else checked_url(url), out=None if out is None else checked_out_dir(out),
                   prefill_lens=lens, decode_output_len=decode_output_len, concurrency_levels=levels,
                   repeats=repeats, kinds=workload or None, ab=ab)


def _int_list(text: str | None, *, option: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise MeasureError(f"{option} {text!r} is not a comma-separated list of integers", hint=f"e.g. {option} 1,2,4") from None


def bench_command(*, target: str, options: BenchOptions) -> list[BenchEvidence] | dict:
    """`builder bench`: the standard workloads against the target's server, or with `options.ab` an
    interleaved A/B of that server (arm A) against a second endpoint (arm B)."""
    cfg = config.load_target(target)
    url = options.url or _default_url(cfg)
    out_dir = options.out or checked_out_dir(EVIDENCE_DIR / cfg.target.name)
    ab = options.ab
    if ab is not None:
        return run_ab(
            url_a=url, url_b=ab.url_b, label_a=ab.label_a, label_b=ab.label_b,
            out_dir=out_dir / f"ab-{ab.label_a}-vs-{ab.label_b}", rounds=ab.rounds, input_len=ab.input_len,
            output_len=ab.output_len, background_streams=ab.background_streams,
        )
    return run_bench(
        url=url, target=cfg.target.name, config_digest=config.config_digest(cfg),
        out_dir=out_dir, max_model_len=cfg.server.max_model_len,
        prefill_lens=options.prefill_lens, decode_output_len=options.decode_output_len,
        concurrency_levels=options.concurrency_levels, repeats=options.repeats, kinds=options.kinds,
    )

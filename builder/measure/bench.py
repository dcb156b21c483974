"""`builder bench`: the release workloads, or an interleaved A/B, against live endpoints."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from builder.errors import MeasureError
from builder.measure import client as bench
from builder.measure.evidence import BenchEvidence, now, write_bytes_atomic, write_json_atomic, write_text_atomic
from builder.measure.report import bench_chart_png, bench_markdown, bench_table, make_console
from builder.measure.server import probe
from builder.serve.auth import auth_headers

Workload = bench.Workload


@contextmanager
def endpoint_errors() -> Iterator[None]:
    """The client's EndpointError (a request the run needs was refused) as a MeasureError: exit 50
    with the endpoint, its answer and the fix, not a traceback."""
    try:
        yield
    except bench.EndpointError as exc:
        raise MeasureError(exc.message, hint=exc.hint) from None


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console,
    )


async def run_suite_async(
    *, url: str, suite: list[Any], target: str, config_digest: str, out_dir: Path, console: Console,
) -> list[BenchEvidence]:
    """Run each workload in turn; write bench-<workload>.json as each finishes."""
    with endpoint_errors():
        return await _run_suite(url=url, suite=suite, target=target, config_digest=config_digest, out_dir=out_dir,
                                console=console)


async def _run_suite(
    *, url: str, suite: list[Any], target: str, config_digest: str, out_dir: Path, console: Console,
) -> list[BenchEvidence]:
    results = []
    async with httpx.AsyncClient(headers=auth_headers()) as client:
        server = await probe(client, url)
        for wl in suite:
            if wl.input_len + wl.output_len > server.max_model_len:
                raise MeasureError(
                    f"workload {wl.name}: {wl.input_len}+{wl.output_len} tokens exceed the server's "
                    f"max_model_len {server.max_model_len}",
                    hint="lower --prefill-lens or the output length",
                )
        with _progress(console) as progress:
            total = progress.add_task("requests", total=sum(w.num_prompts for w in suite))
            for wl in suite:
                progress.update(total, description=escape(wl.name))
                raw = await bench.run_workload(
                    client, server.url, server.served_model, wl, on_done=lambda: progress.advance(total)
                )
                ev = BenchEvidence.model_validate(
                    {**raw, "server": server, "config_digest": config_digest, "target": target, "created": now()}
                )
                write_json_atomic(out_dir / f"bench-{wl.name}.json", ev)
                results.append(ev)
    failed = sum(r.failed for r in results)
    if failed:
        errors = sorted({e for r in results for e in (r.model_extra or {}).get("errors", [])})
        raise MeasureError(f"{failed} benchmark request(s) failed: {errors[:3]}",
                           hint=f"see {out_dir}/bench-*.json and the server log")
    return results


def run_bench(
    *, url: str, target: str, config_digest: str, out_dir: Path, max_model_len: int,
    prefill_lens: list[int] | None = None, decode_output_len: int = 512,
    concurrency_levels: list[int] | None = None, repeats: int = 3, kinds: list[str] | None = None,
) -> list[BenchEvidence]:
    """Run the standard suite and write JSON per workload, bench.md and bench.png into out_dir."""
    console = make_console()
    try:
        suite = bench.standard_suite(
            max_model_len, prefill_lens=prefill_lens, decode_output_len=decode_output_len,
            concurrency_levels=concurrency_levels or (1, 2, 4, 8), repeats=repeats,
        )
    except ValueError as exc:
        raise MeasureError(str(exc), hint="pass --prefill-lens that fit the context") from exc
    if kinds:
        suite = [w for w in suite if w.kind in kinds]
    results = asyncio.run(run_suite_async(
        url=url, suite=suite, target=target, config_digest=config_digest, out_dir=out_dir, console=console,
    ))
    title = f"{target}: benchmark"
    write_text_atomic(out_dir / "bench.md", bench_markdown(results, title=title))
    png = bench_chart_png(results, title=title)
    if png is None:
        console.print("[yellow]matplotlib is not installed (pip install '.[plot]'): no bench.png[/]")
    else:
        write_bytes_atomic(out_dir / "bench.png", png)
    console.print(bench_table(results))
    return results


def run_ab(
    *, url_a: str, url_b: str, label_a: str, label_b: str, out_dir: Path, rounds: int,
    input_len: int, output_len: int, background_streams: int,
) -> dict[str, Any]:
    """Interleaved A/B of two endpoints; writes ab.json and ab.md and prints the delta table."""
    console = make_console()

    async def go() -> dict[str, Any]:
        async with httpx.AsyncClient(headers=auth_headers()) as client:
            servers = [await probe(client, u) for u in (url_a, url_b)]
            arms = [bench.Arm(lbl, s.url, s.served_model) for lbl, s in zip((label_a, label_b), servers)]
            with _progress(console) as progress:
                task = progress.add_task(escape(f"A/B {label_a} vs {label_b}"), total=2 * rounds)
                try:
                    ab = await bench.run_ab(
                        client, *arms, rounds=rounds, input_len=input_len, output_len=output_len,
                        background_streams=background_streams, on_done=lambda: progress.advance(task),
                    )
                except bench.RequestFailed as exc:  # a failed measured request names its arm
                    raise MeasureError(str(exc), hint="check that arm's server log") from exc
            ab["servers"] = {lbl: s.model_dump() for lbl, s in zip((label_a, label_b), servers)}
            ab["created"] = now().isoformat()
            return ab

    with endpoint_errors():
        ab = asyncio.run(go())
    table = bench.format_ab_table(ab)
    write_json_atomic(out_dir / "ab.json", ab)
    text = (
        f"# A/B: {label_a} vs {label_b}\n\n{rounds} interleaved rounds (ABBA order), prompt {input_len} "
        f"tokens, {output_len} output tokens, {background_streams} background decode stream(s) on the arm "
        f"under test. Delta = (B - A) / A per pair; spread = sd of the per-pair deltas.\n\n{table}\n"
    )
    write_text_atomic(out_dir / "ab.md", text)
    console.print(table, highlight=False, markup=False)
    return ab

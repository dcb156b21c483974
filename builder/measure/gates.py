"""The seven quality gates. Each sends real requests at temperature 0 and returns its evidence.

A gate function returns a `GateOutcome` (verdict, thresholds, what it saw, raw exchanges);
`run_gates` adds the server, config digest and timestamp and writes evidence/<target>/<gate>.json.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

import httpx
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from builder.constants import GATE_NAMES, REPO_ROOT
from builder.errors import GateFailed, MeasureError
from builder.measure.api_surface import ApiSurface
from builder.measure import client as bench
from builder.measure.bench import endpoint_errors
from builder.measure.evidence import GateEvidence, ServerInfo, now, write_json_atomic
from builder.measure.report import make_console
from builder.measure.server import probe
from builder.measure.settings import Expectations, GateSettings, PlannedPool, Probe, RecallTask, load_expectations
from builder.redact import redact
from builder.serve.auth import api_key, auth_headers

# Room left in the context for the answer and the chat template's closing tokens.
_ANSWER_ROOM = 64


Exchange = dict[str, Any]


@dataclass
class GateOutcome:
    verdict: Literal["pass", "fail"]
    summary: str
    thresholds: dict[str, Any]
    observed: dict[str, Any]
    exchanges: list[Exchange] = field(default_factory=list)


@dataclass
class GateContext:
    client: httpx.AsyncClient
    server: ServerInfo
    settings: GateSettings
    expectations: Expectations
    server_log: str | None = None

    async def chat(self, label: str, prompt: str, max_tokens: int) -> tuple[str, Exchange]:
        spec = bench.RequestSpec(
            max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}],
            temperature=0.0, ignore_eos=False, extra={"seed": 0},
        )
        request, response = await bench.post_json(self.client, self.server.url, self.server.served_model, spec)
        if "http_status" in response:
            raise MeasureError(
                f"{label}: the server answered HTTP {response['http_status']}: {redact(json.dumps(response))[:300]}",
                hint="check that the prompt fits max_model_len and the server log",
            )
        return bench.response_text(response), {"label": label, "request": request, "response": response}

    async def metrics(self) -> list[Any]:
        return await bench.scrape(self.client, self.server.url)


def _matches(pattern: str, text: str) -> bool:
    return re.search(pattern, text) is not None


async def _run_probes(ctx: GateContext, probes: list[Probe]) -> tuple[dict[str, bool], dict[str, str], list[Exchange]]:
    passed, answers, exchanges = {}, {}, []
    for p in probes:
        text, ex = await ctx.chat(p.name, p.prompt, p.max_tokens)
        passed[p.name] = _matches(p.expect, text)
        answers[p.name] = text
        exchanges.append(ex)
    return passed, answers, exchanges


async def gate_golden(ctx: GateContext) -> GateOutcome:
    passed, answers, exchanges = await _run_probes(ctx, ctx.expectations.golden)
    n, total = sum(passed.values()), len(passed)
    return GateOutcome(
        verdict="pass" if n == total else "fail",
        summary=f"{n}/{total} probes",
        thresholds={"min_pass": total, "temperature": 0.0},
        observed={"passed": passed, "answers": answers},
        exchanges=exchanges,
    )


def _baseline_pass_set(ctx: GateContext) -> tuple[set[str], str]:
    path = ctx.settings.gates.battery_baseline
    if path is not None:
        try:
            ev = GateEvidence.model_validate_json((REPO_ROOT / path).read_text())
            baseline = {k for k, ok in ev.observed["passed"].items() if ok}
        except (OSError, KeyError, ValidationError) as exc:
            raise MeasureError(f"gates.battery_baseline {path} is not readable battery evidence: {exc}",
                               hint="point it at the battery.json of the baseline run") from exc
        return baseline, str(path)
    base = ctx.expectations.battery_baseline
    if base is None:
        raise MeasureError(
            f"no battery baseline for model {ctx.expectations.model}",
            hint="set gates.battery_baseline to a baseline run's battery.json, or record "
                 "battery_baseline in the expectation file",
        )
    return set(base.passed), base.source


async def gate_battery(ctx: GateContext) -> GateOutcome:
    passed, answers, exchanges = await _run_probes(ctx, ctx.expectations.battery)
    now_pass = {k for k, ok in passed.items() if ok}
    try:
        baseline, source = _baseline_pass_set(ctx)
    except MeasureError as exc:
        # Still written, so a baseline run's file can become the baseline of the others.
        return GateOutcome(
            verdict="fail", summary=f"{len(now_pass)}/{len(passed)} tasks, no baseline to compare",
            thresholds={"max_regressions": ctx.settings.gates.battery_max_regressions, "baseline_error": exc.message},
            observed={"passed": passed, "answers": answers}, exchanges=exchanges,
        )
    regressions = sorted(baseline - now_pass)
    limit = ctx.settings.gates.battery_max_regressions
    return GateOutcome(
        verdict="pass" if len(regressions) <= limit else "fail",
        summary=f"{len(now_pass)}/{len(passed)} tasks, {len(regressions)} lost vs baseline {len(baseline)}",
        thresholds={"max_regressions": limit, "baseline_passed": sorted(baseline), "baseline_source": source},
        observed={"passed": passed, "answers": answers, "regressions": regressions,
                  "gains": sorted(now_pass - baseline)},
        exchanges=exchanges,
    )


async def gate_determinism(ctx: GateContext) -> GateOutcome:
    runs, limit = ctx.settings.gates.determinism_runs, ctx.settings.gates.determinism_max_unique
    # Sent together: batch composition is what makes greedy output drift.
    results = await asyncio.gather(*(
        ctx.chat(f"run-{i}", ctx.expectations.determinism_prompt, 64) for i in range(runs)
    ))
    # The whole generation, reasoning included: content alone may be empty for every run.
    texts = [bench.response_full_text(ex["response"]) for _, ex in results]
    unique = len(set(texts))
    return GateOutcome(
        verdict="pass" if unique <= limit else "fail",
        summary=f"{unique} unique of {runs}",
        thresholds={"runs": runs, "max_unique": limit, "temperature": 0.0},
        observed={"unique": unique, "distinct_outputs": sorted(set(texts))},
        exchanges=[ex for _, ex in results],
    )


_FILLER_SUBJECTS = "The gardener|A traveler|The old clock|Our neighbor|The river|A small boat|The teacher|The market".split("|")
_FILLER_VERBS = "watched|painted|carried|forgot|described|visited|repaired|followed".split("|")
_FILLER_OBJECTS = "the quiet hills|a wooden fence|the morning bread|an empty jar|the long road|a blue kite|the evening bells|a stack of letters".split("|")


def _filler(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(_FILLER_SUBJECTS)} {rng.choice(_FILLER_VERBS)} {rng.choice(_FILLER_OBJECTS)}."
            for _ in range(n)]


async def _long_prompt(ctx: GateContext, task: RecallTask, value: str, tokens: int, depth: float, seed: int) -> str:
    """Filler sentences with the fact at `depth`, then the question; the largest such prompt
    whose chat-templated length is <= tokens - answer room (found by binary search)."""
    budget = tokens - _ANSWER_ROOM
    fact = task.fact.format(value=value)
    question = task.question.format(value=value)
    sentences = _filler(tokens, seed)

    def render(n: int) -> str:
        body = sentences[:n]
        body.insert(round(depth * n), fact)
        return " ".join(body) + "\n\n" + question

    async def fits(n: int) -> bool:
        msgs = [{"role": "user", "content": render(n)}]
        return await bench.count_tokens(ctx.client, ctx.server.url, ctx.server.served_model, messages=msgs) <= budget

    lo, hi = 0, len(sentences)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if await fits(mid) else (lo, mid - 1)
    if lo == 0:
        raise MeasureError(f"a {tokens}-token budget cannot hold the recall task", hint="raise the token count")
    return render(lo)


async def gate_needle(ctx: GateContext) -> GateOutcome:
    s, task = ctx.settings, ctx.expectations.needle
    if s.needle_tokens > ctx.server.max_model_len:
        raise MeasureError(
            f"gates.needle_tokens={s.needle_tokens} exceeds the server's max_model_len={ctx.server.max_model_len}",
            hint="lower gates.needle_tokens or serve a longer context",
        )
    value = f"{random.Random(7).randint(100000, 999999)}"
    prompt = await _long_prompt(ctx, task, value, s.needle_tokens, s.gates.needle_depth, seed=1)
    text, ex = await ctx.chat("needle", prompt, task.max_tokens)
    expect = task.expect.format(value=value)
    found = _matches(expect, text)
    prompt_tokens = ex["response"].get("usage", {}).get("prompt_tokens")
    return GateOutcome(
        verdict="pass" if found else "fail",
        summary=f"{'found' if found else 'missed'} at {prompt_tokens} tokens, depth {s.gates.needle_depth:.0%}",
        thresholds={"tokens": s.needle_tokens, "depth": s.gates.needle_depth, "expect": expect},
        observed={"answer": text, "prompt_tokens": prompt_tokens, "found": found},
        exchanges=[ex],
    )


async def gate_prefix_cache(ctx: GateContext) -> GateOutcome:
    s, task = ctx.settings, ctx.expectations.prefix_cache
    value = f"{random.Random(11).randint(1000, 9999)}"
    prompt = await _long_prompt(ctx, task, value, s.prefix_tokens, 0.1, seed=2)
    before = await ctx.metrics()
    first, ex1 = await ctx.chat("first", prompt, task.max_tokens)
    middle = await ctx.metrics()
    second, ex2 = await ctx.chat("repeat", prompt, task.max_tokens)
    after = await ctx.metrics()
    hits = [bench.metric_sum(m, "vllm:prefix_cache_hits") for m in (before, middle, after)]
    if None in hits:
        raise MeasureError("the server's /metrics has no vllm:prefix_cache_hits counter",
                           hint="serve with prefix caching on (vLLM V1 default) and a vLLM that exports it")
    repeat_hits = hits[2] - hits[1]
    expect = task.expect.format(value=value)
    identical = bench.response_full_text(ex1["response"]) == bench.response_full_text(ex2["response"])
    recalled = _matches(expect, first) and _matches(expect, second)
    ok = identical and recalled and repeat_hits > 0
    return GateOutcome(
        verdict="pass" if ok else "fail",
        summary=f"identical={identical} recalled={recalled} cache hit tokens +{repeat_hits:.0f}",
        thresholds={"identical": True, "recall": expect, "min_repeat_hit_tokens": 1, "tokens": s.prefix_tokens},
        observed={"identical": identical, "recalled": recalled, "answers": [first, second],
                  "prefix_cache_hits": hits, "repeat_hit_tokens": repeat_hits,
                  "first_request_hit_tokens": hits[1] - hits[0]},
        exchanges=[ex1, ex2],
    )


def _label_int(info: dict[str, str], key: str) -> int | None:
    value = info.get(key)
    return None if value in (None, "", "None") else int(value)


def measured_vs_planned(tokens: int, info: dict[str, str], plan: PlannedPool) -> dict[str, Any]:
    """The measured pool next to builder.plan's. With the server's block count and block size
    (cache_config_info), the layout is checked on its own, apart from the estimated budget: the
    pool the plan's layout gives for the server's blocks, and the KV memory those blocks imply."""
    out: dict[str, Any] = {
        "planned_tokens": plan.pool_tokens, "measured_over_planned": tokens / plan.pool_tokens if plan.pool_tokens else None,
        "planned_block_size": plan.block_size, "planned_kv_bytes": plan.kv_bytes, "plan_budget_exact": plan.budget_exact,
    }
    blocks, block_size = _label_int(info, "num_gpu_blocks"), _label_int(info, "block_size")
    if block_size is not None:
        out["block_size_matches_plan"] = block_size == plan.block_size
    if blocks is not None:
        out["pool_from_server_blocks"] = int(blocks / plan.pages_per_request * plan.max_model_len)
        out["kv_bytes_implied_by_server_blocks"] = blocks * plan.bytes_per_block
    return out


def kv_pool_outcome(*, tokens: int, source: str, info: dict[str, str], settings: GateSettings) -> GateOutcome:
    """The kv_pool verdict for a measured pool: pass at or above the floor; report against the plan."""
    s = settings
    below_target = tokens < s.kv_pool_target_tokens
    observed: dict[str, Any] = {"kv_pool_tokens": tokens, "source": source, "below_target": below_target,
                                "cache_config_info": info}
    summary = f"{tokens:,} tokens" + (" (below target)" if below_target else "")
    if s.kv_pool_plan is not None:
        observed["plan"] = measured_vs_planned(tokens, info, s.kv_pool_plan)
        summary += f", planned {s.kv_pool_plan.pool_tokens:,}"
    else:
        observed["plan"] = {"error": s.kv_pool_plan_error}
    return GateOutcome(
        verdict="pass" if tokens >= s.kv_pool_floor_tokens else "fail",
        summary=summary,
        thresholds={"floor_tokens": s.kv_pool_floor_tokens, "target_tokens": s.kv_pool_target_tokens,
                    "from": s.kv_pool_thresholds_from},
        observed=observed,
        exchanges=[],
    )


async def gate_kv_pool(ctx: GateContext) -> GateOutcome:
    samples = await ctx.metrics()
    tokens, source = bench.kv_pool_tokens(samples), "/metrics vllm:cache_config_info"
    if tokens is None and ctx.server_log is not None:
        tokens, source = bench.kv_pool_tokens_from_log(ctx.server_log), "server log 'KV cache size: N tokens'"
    if tokens is None:
        raise MeasureError("neither /metrics (vllm:cache_config_info) nor a server log gives the KV pool size",
                           hint="pass --server-log with the server's startup log")
    info = next((s_.labels for s_ in samples if s_.name == "vllm:cache_config_info"), {})
    return kv_pool_outcome(tokens=tokens, source=source, info=info, settings=ctx.settings)


async def gate_api_surface(ctx: GateContext) -> GateOutcome:
    """The OpenAI API features users rely on, each followed by /health (builder/measure/api_surface.py)."""
    surface = ApiSurface(url=ctx.server.url, model=ctx.server.served_model, max_model_len=ctx.server.max_model_len,
                         api_key=api_key(), http=ctx.client, json_mode=ctx.expectations.api_surface.json_mode)
    checks = await surface.run()
    failed = [c.name for c in checks if not c.ok]
    return GateOutcome(
        verdict="fail" if failed else "pass",
        summary=f"{len(checks) - len(failed)}/{len(checks)} checks" + (f", failed: {', '.join(failed)}" if failed else ""),
        thresholds={"checks": [c.name for c in checks], "health_after_each": 200},
        observed={"passed": {c.name: c.ok for c in checks}, "details": {c.name: c.detail for c in checks},
                  "failed": failed},
        exchanges=[c.model_dump() for c in checks],
    )


GATES: dict[str, Callable[[GateContext], Awaitable[GateOutcome]]] = {
    "golden_probes": gate_golden,
    "battery": gate_battery,
    "determinism": gate_determinism,
    "needle": gate_needle,
    "prefix_cache": gate_prefix_cache,
    "kv_pool": gate_kv_pool,
    "api_surface": gate_api_surface,
}
assert tuple(GATES) == GATE_NAMES


async def run_gates_async(
    *, url: str, target: str, settings: GateSettings, config_digest: str, out_dir: Path,
    only: list[str] | None = None, server_log: str | None = None, console: Console | None = None,
) -> list[GateEvidence]:
    """Run the gates against `url`, writing one evidence file per gate into `out_dir`."""
    console = console or make_console()
    expectations = load_expectations(settings.expectations)
    names = only or list(GATE_NAMES)
    unknown = sorted(set(names) - set(GATES))
    if unknown:
        raise MeasureError(f"unknown gate(s) {unknown}", hint=f"choose from {list(GATE_NAMES)}")
    with endpoint_errors():
        return await _run_gates(url=url, target=target, settings=settings, config_digest=config_digest,
                                out_dir=out_dir, names=names, expectations=expectations, server_log=server_log,
                                console=console)


async def _run_gates(
    *, url: str, target: str, settings: GateSettings, config_digest: str, out_dir: Path, names: list[str],
    expectations: Expectations, server_log: str | None, console: Console,
) -> list[GateEvidence]:
    results = []
    async with httpx.AsyncClient(headers=auth_headers()) as client:
        server = await probe(client, url)
        ctx = GateContext(client=client, server=server, settings=settings, expectations=expectations,
                          server_log=server_log)
        with console.status("") as status:
            for name in names:
                # Redacted before rich lays the text out: a key wrapped across lines is no longer found.
                status.update(Text(redact(f"gate {name} on {server.served_model} ({server.kv_cache_dtype} KV)")))
                outcome = await GATES[name](ctx)
                ev = GateEvidence(
                    gate=name, required=name in settings.gates.required, verdict=outcome.verdict,
                    summary=outcome.summary, thresholds=outcome.thresholds, observed=outcome.observed,
                    records=outcome.exchanges, server=server, server_version=server.version,
                    config_digest=config_digest, target=target, created=now(),
                )
                write_json_atomic(out_dir / f"{name}.json", ev)
                results.append(ev)
                console.print(redact(f"  {name:<13} {ev.verdict.upper():<4}  {ev.summary}"), highlight=False, markup=False)
    return results


def gate_table(results: list[GateEvidence]) -> Table:
    table = Table(title="quality gates")
    for col in ("gate", "required", "verdict", "summary"):
        table.add_column(col)
    for ev in results:
        colour = "green" if ev.verdict == "pass" else "red"
        table.add_row(ev.gate, "yes" if ev.required else "no", Text(ev.verdict, style=colour), Text(redact(ev.summary)))
    return table


def run_gates(
    *, url: str, target: str, settings: GateSettings, config_digest: str, out_dir: Path,
    only: list[str] | None = None, server_log: str | None = None,
) -> list[GateEvidence]:
    """Run the gates, print the table, and raise GateFailed when a required gate failed."""
    console = make_console()
    results = asyncio.run(run_gates_async(
        url=url, target=target, settings=settings, config_digest=config_digest,
        out_dir=out_dir, only=only, server_log=server_log, console=console,
    ))
    console.print(gate_table(results))
    failed = [ev.gate for ev in results if ev.required and ev.verdict == "fail"]
    if failed:
        raise GateFailed(
            f"required gate(s) failed on {url}: {', '.join(failed)} (evidence in {out_dir})",
            hint="read the failing gate's JSON for the raw answers; do not release this config",
        )
    return results

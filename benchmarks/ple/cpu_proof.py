"""CPU proof of the ple-mmap patch: the patched vllm 0.33.0's own PLE classes load synthetic
Qwen4Exp checkpoints inside memory-limited containers.

    .venv/bin/python -m benchmarks.ple.cpu_proof --out evidence/ple

Runs two containers of the local base image (scripts/build-base-image.sh) with no network:
  limited  (--memory, default 1 GiB, no swap) on a bf16 table of --table-gib (default 4.5 GiB,
           > 4x the limit): upstream's resident table (the control, whose load must be OOM-killed),
           the mmap table in place at TP1 and at TP2, and a table file built from it (f16 table
           from the bf16 checkpoint, so the engine must build and write it under the limit).
  small    (no limit) on small checkpoints: a table file reused, then found corrupted (one byte
           flipped), then truncated, each time detected and rebuilt; a checkpoint rewritten with
           the same layout (new table file); fp8 and nvfp4 tables at TP1 and TP2.
Every load goes through Qwen4ExpNGramEmbedding, vLLM's safetensors_weights_iterator and
process_weights_after_loading; every lookup is compared byte for byte with the safetensors
library's read of the same rows (benchmarks/ple/probe.py). Writes cpu.json and cpu.md.

Inside the containers: the base image's python3 (3.11), the patched engine tree (cached under
~/.cache/qfn-int8kv/ple-mmap/), the packages of engine-requirements.txt (cached there too), and
this interpreter's site-packages (torch CPU, transformers, safetensors), all mounted read-only.
tests/patches/test_ple_mmap_cpu.py runs the same plans at CI size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from builder.constants import CACHE_DIR, PATCHES_DIR

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "engine-requirements.txt"
BASE_IMAGE = "127.0.0.1:5000/qfn-base:bookworm"
ROW_BYTES = 256  # bf16 rows of head_dim 128 (ple_embed_dim 2048 over 16 n-gram heads)
HEADS = 16
ENGINE_CACHE = CACHE_DIR / "ple-mmap"


@dataclass(frozen=True)
class EngineEnv:
    tree: Path  # the vllm 0.33.0 Python sources with the whole series applied
    deps: Path  # engine-requirements.txt, installed with --no-deps
    site: Path  # this interpreter's site-packages


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def engine_env(*, log=print) -> EngineEnv:
    """The patched engine tree and its CPU dependencies, built once per series / requirements."""
    from builder.patches.apply import apply_series
    from builder.patches.engine import fetch_engine

    if sys.version_info[:2] != (3, 11):
        raise RuntimeError(
            f"this interpreter is Python {sys.version_info[0]}.{sys.version_info[1]}; the base image's "
            "python3 is 3.11 and imports these site-packages, so run with a 3.11 venv"
        )
    ENGINE_CACHE.mkdir(parents=True, exist_ok=True)
    series = [PATCHES_DIR / "series", *sorted(PATCHES_DIR.glob("*.diff"))]
    tree = ENGINE_CACHE / f"tree-{_digest(series)}"
    if not tree.is_dir():
        log(f"patching a copy of vllm 0.33.0 into {tree}")
        scratch = Path(tempfile.mkdtemp(prefix=".tree-", dir=ENGINE_CACHE))
        try:
            shutil.copytree(fetch_engine(log=log).src_dir, scratch, dirs_exist_ok=True)
            apply_series(target=scratch, patches_dir=PATCHES_DIR)
            scratch.rename(tree)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    deps = ENGINE_CACHE / f"deps-{_digest([REQUIREMENTS])}"
    if not deps.is_dir():
        log(f"installing {REQUIREMENTS.name} into {deps}")
        scratch = Path(tempfile.mkdtemp(prefix=".deps-", dir=ENGINE_CACHE))
        try:
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
                 "--target", str(scratch), "-r", str(REQUIREMENTS)],
                check=True,
            )  # fmt: skip
            scratch.rename(deps)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return EngineEnv(tree=tree, deps=deps, site=Path(sysconfig.get_paths()["purelib"]))


def base_for_table(gib: float) -> int:
    """ngram_vocab_size_base giving a bf16 table of about ``gib`` GiB (16 heads of ~base rows)."""
    return int(gib * 2**30 / ROW_BYTES / HEADS)


def limited_plan(*, table_gib: float, reuse: bool) -> list[dict]:
    ckpt, tables = "/work/ckpt-bf16", "/work/tables-limited"
    plan = [
        {"step": "write", "name": "write bf16 checkpoint", "out": ckpt, "base": base_for_table(table_gib)},
        {"step": "load", "name": "control: resident table (upstream, no mmap)", "ckpt": ckpt, "mode": "resident", "expect": "oom"},
        {"step": "load", "name": "mmap in place, TP1", "ckpt": ckpt, "mode": "mmap", "table_dir": tables},
        {"step": "load", "name": "mmap in place, TP2", "ckpt": ckpt, "mode": "mmap", "tp": 2, "table_dir": tables},
        {"step": "load", "name": "mmap table file built (f16 from bf16), TP1", "ckpt": ckpt, "mode": "mmap", "dtype": "float16", "table_dir": tables},
    ]  # fmt: skip
    if reuse:
        plan.append(
            {"step": "load", "name": "mmap table file reused (CRCs checked), TP1", "ckpt": ckpt, "mode": "mmap", "dtype": "float16", "table_dir": tables}
        )
    return plan


def limited_plans_apart(*, table_gib: float) -> tuple[list[dict], list[dict]]:
    """limited_plan (without reuse) for two containers: the checkpoint written by one without a
    limit, the loads in the limited one. Written in the limited container, the checkpoint's page
    cache is charged to that container: when the resident control reaches the limit, reclaim
    keeps evicting and refaulting those pages, and the OOM kill came after anything from 18 s to
    22 minutes on 2 cores. Charged to the writer's cgroup instead, the cache is not the limited
    container's to reclaim, and the control is killed within a second or two (should the host
    evict that cache first, the control reads the checkpoint back and may be slow again, never
    wrong). Before the mapped loads the checkpoint is dropped from the page cache, so they fault
    it in under the limit as the single-container run does."""
    write, control, *mapped = limited_plan(table_gib=table_gib, reuse=False)
    uncache = {"step": "uncache", "name": "drop the checkpoint from the page cache", "dir": write["out"]}
    return [write], [control, uncache, *mapped]


def small_plan() -> list[dict]:
    bf16, tables = "/work/small-bf16", "/work/tables-small"
    f16 = {"ckpt": bf16, "mode": "mmap", "dtype": "float16", "table_dir": tables}
    plan = [
        {"step": "write", "name": "write small bf16 checkpoint", "out": bf16, "base": 6000, "split": 64},
        {"step": "load", "name": "table file built, TP2", "tp": 2, **f16},
        {"step": "load", "name": "table file reused, TP2", "tp": 2, **f16},
        {"step": "damage", "name": "flip one data byte", "dir": tables, "flip": 4096 + 17},
        {"step": "load", "name": "flipped byte detected, rebuilt, TP2", "tp": 2, **f16},
        {"step": "damage", "name": "truncate by 100 bytes", "dir": tables, "cut": 100},
        {"step": "load", "name": "truncation detected, rebuilt, TP2", "tp": 2, **f16},
        {"step": "write", "name": "rewrite checkpoint, same layout", "out": bf16, "base": 6000, "split": 64, "seed": 5},
        {"step": "load", "name": "rewritten checkpoint: new table file, TP2", "tp": 2, **f16},
    ]  # fmt: skip
    plan += [
        {"step": "write", "name": "write a checkpoint without PLE layers", "out": "/work/plain", "base": 1000, "split": 4, "ple_layers": []},
        {"step": "config", "name": "engram config validation", "ple_ckpt": bf16, "plain_ckpt": "/work/plain"},
    ]
    for method, stored in (("fp8", "F8_E4M3"), ("nvfp4", "U8")):
        ckpt = f"/work/small-{method}"
        plan.append({"step": "write", "name": f"write small {method} checkpoint", "out": ckpt, "base": 6000, "split": 64, "method": method, "stored": stored})
        for tp in (1, 2):
            plan.append({"step": "load", "name": f"{method} in place, TP{tp}", "ckpt": ckpt, "mode": "mmap", "tp": tp, "method": method, "stored": stored, "table_dir": tables})
    return plan


def run_plan(*, env: EngineEnv, plan: list[dict], work: Path, memory: str | None, log=print) -> dict:
    """Run ``plan`` in one container; returns its steps (parsed JSON lines), log tail and state."""
    import docker

    client = docker.from_env()
    (work / "plan.json").write_text(json.dumps(plan, indent=1))
    name = f"qfn-int8kv-ple-proof-{os.getpid()}-{os.urandom(3).hex()}"
    volumes = {
        str(env.tree): {"bind": "/engine", "mode": "ro"},
        str(env.deps): {"bind": "/deps", "mode": "ro"},
        str(env.site): {"bind": "/venv-site", "mode": "ro"},
        str(HERE): {"bind": "/probe", "mode": "ro"},
        str(work): {"bind": "/work", "mode": "rw"},
    }
    started = time.monotonic()
    container = client.containers.run(
        BASE_IMAGE,
        ["python3", "/probe/probe.py", "/work/plan.json"],
        name=name,
        detach=True,
        network_mode="none",
        volumes=volumes,
        environment={"PYTHONPATH": "/engine:/deps:/venv-site", "VLLM_TARGET_DEVICE": "cpu", "PYTHONUNBUFFERED": "1"},
        mem_limit=memory,
        memswap_limit=memory,  # no swap: the limit is the memory
        labels={"org.qfn-int8kv.test": "ple-mmap-cpu-proof"},
    )
    steps: list[dict] = []
    engine_log: list[str] = []  # the engine's own PLE table lines (built, reused, unusable, ...)
    try:
        for raw in container.logs(stream=True, follow=True):
            for line in raw.decode(errors="replace").splitlines():
                if line.startswith("{"):
                    steps.append(json.loads(line))
                    log(f"  {'PASS' if steps[-1]['passed'] else 'FAIL'} {steps[-1]['name']} ({steps[-1]['seconds']} s)")
                elif "PLE table" in line and "% written" not in line:
                    engine_log.append(line.split("] ", 1)[-1])
        status = container.wait()
        container.reload()
        state = container.attrs["State"]
        tail = container.logs(tail=60).decode(errors="replace")
    finally:
        container.remove(force=True)
    return {
        "memory_limit": memory,
        "exit_code": status["StatusCode"],
        "container_oom_killed": state.get("OOMKilled"),
        "seconds": round(time.monotonic() - started, 1),
        "steps": steps,
        "engine_log": engine_log,
        "log_tail": tail,
        "passed": status["StatusCode"] == 0 and len(steps) == len(plan) and all(s["passed"] for s in steps),
    }


def _row(step: dict) -> str:
    ranks = step.get("ranks", [])
    load = ", ".join(f"{r['load_s']}" for r in ranks if "load_s" in r) or "-"
    rss = ", ".join(f"{r['peak_rss_mib']:.0f}" for r in ranks if "peak_rss_mib" in r) or "-"
    storage = "; ".join(sorted({r["storage"] for r in ranks if "storage" in r})) or "-"
    lookups = "-"
    if ranks and all("lookups_ok" in r for r in ranks):
        lookups = f"{ranks[0]['ids']} ids, " + ("bit-identical" if all(r["lookups_ok"] and r.get("local_rows_ok", True) for r in ranks) else "MISMATCH")
    outcome = "pass" if step["passed"] else "FAIL"
    if step.get("oom_kills"):
        outcome += f" (OOM-killed, exit {step['exitcodes']})"
    if "error" in json.dumps(ranks):
        outcome += " error: " + "; ".join(r.get("error", "") for r in ranks if "error" in r)[:200]
    return f"| {step['name']} | {outcome} | {load} | {rss} | {lookups} | {storage} |"


def report_markdown(results: dict) -> str:
    lines = []
    for label, run in results["runs"].items():
        lines += [
            f"### {label}: memory limit {run['memory_limit'] or 'none'}, {run['seconds']} s, "
            f"{'passed' if run['passed'] else 'FAILED'}",
            "",
            "| step | outcome | load s (per rank) | peak RSS MiB (per rank) | lookups | storage |",
            "|---|---|---|---|---|---|",
        ]
        for step in run["steps"]:
            if step["step"] == "write":
                info = step["checkpoint"]
                lines.append(
                    f"| {step['name']} | {info['bytes'] / 2**30:.2f} GiB, {info['rows']} rows x {info['shard_rows']}-row shards, "
                    f"{info['files']} files | {step['seconds']} | - | - | - |"
                )
            elif step["step"] == "damage":
                lines.append(f"| {step['name']} | {', '.join(step['files'])} | - | - | - | - |")
            elif step["step"] == "config":
                for case in step["cases"]:
                    verdict = "pass" if case["ok"] else "FAIL"
                    got = case["got"].replace("|", "\\|").replace("\n", " ")[-160:]
                    lines.append(f"| config: {case['case']} | {verdict}: {got} | - | - | - | - |")
            else:
                lines.append(_row(step))
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "evidence" / "ple")
    parser.add_argument("--memory", default="1g", help="container memory limit of the limited run (docker --memory)")
    parser.add_argument("--table-gib", type=float, default=4.5, help="bf16 table size of the limited run")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp folder, removed after)")
    args = parser.parse_args()

    env = engine_env()
    work = args.work or Path(tempfile.mkdtemp(prefix="qfn-ple-proof-"))
    results = {"engine_tree": env.tree.name, "runs": {}}
    try:
        for label, plan, memory in (
            ("limited", limited_plan(table_gib=args.table_gib, reuse=True), args.memory),
            ("small", small_plan(), None),
        ):
            (work / label).mkdir(parents=True, exist_ok=True)
            print(f"{label}: {len(plan)} steps, memory limit {memory or 'none'}")
            results["runs"][label] = run_plan(env=env, plan=plan, work=work / label, memory=memory)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "cpu.md").write_text(
        "# PLE mmap on CPU: memory-limited loads through the patched engine\n\n"
        "Made by `benchmarks/ple/cpu_proof.py` (rerun: `.venv/bin/python -m benchmarks.ple.cpu_proof "
        f"--out evidence/ple --memory {args.memory} --table-gib {args.table_gib}`).\n\n" + report_markdown(results)
    )
    print(report_markdown(results))
    return 0 if all(r["passed"] for r in results["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

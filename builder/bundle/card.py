"""The model card: front matter, quick start, files, and gate/benchmark tables from evidence.

Numbers come only from evidence files or from builder.plan (marked "computed"); anything absent
is written as "not measured".
"""

from __future__ import annotations

import fnmatch
import json
from importlib import metadata
from pathlib import Path
from typing import Literal

import jinja2
import yaml
from pydantic import BaseModel, ConfigDict

import builder
from builder.config import LaunchPlan, ReleaseConfig, config_digest
from builder.constants import (
    ATTESTATIONS_DIR,
    BENCHMARK_NAME,
    BENCH_EVIDENCE_GLOB,
    BUNDLE_MANIFEST_NAME,
    CARD_VERIFY_PACKAGES,
    CARD_FAILED_GATES_TAG,
    CARD_NAME,
    CHECKSUMS_NAME,
    CLAIMS_FILE,
    ENGINE_AB_EVIDENCE,
    ENVELOPE_SUFFIX,
    ENV_DRY_RUN,
    IMAGE_RECORD_NAME,
    K8S_VERSION,
    LAUNCH_CLUSTER_NAME,
    LAUNCH_ENV_DOC_NAME,
    LAUNCH_HEAD_SCRIPT_NAME,
    LAUNCH_K8S_DIR,
    LAUNCH_MIDDLEWARE_NAME,
    LAUNCH_SCRIPT_NAME,
    LAUNCH_WORKER_SCRIPT_NAME,
    LWS_RELEASE,
    PROVENANCE_NAME,
    PUBLIC_KEY_NAME,
    SBOM_NAME,
    SIGNATURE_NAME,
)
from builder.bundle.gates import describe_blocking, gate_report
from builder.bundle.manifest import ImageRef
from builder.errors import BuilderError, RenderError
from builder.evidence import load_ledger
from builder.measure.evidence import GateEvidence, load_gate_evidence
from builder.plan import HostsComparison, plan_against_single_host, plan_target
from builder.plan.models import CapacityPlan
from builder.bundle.card_capacity import CapacitySection, capacity_section
from builder.launch.compose import COMPOSE_NAME, ROLES, compose_name, docker_run_line
from builder.launch.environment import make_environment, render_template

NOT_MEASURED = "not measured"

#: (evidence key, column header, format): vLLM `bench serve` key names.
BENCH_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("input_len", "input tokens", "{:,.0f}"),
    ("output_len", "output tokens", "{:,.0f}"),
    ("concurrency", "concurrency", "{:,.0f}"),
    ("mean_ttft_ms", "TTFT mean (ms)", "{:,.1f}"),
    ("median_ttft_ms", "TTFT median (ms)", "{:,.1f}"),
    ("p99_ttft_ms", "TTFT p99 (ms)", "{:,.1f}"),
    ("mean_tpot_ms", "TPOT mean (ms)", "{:,.2f}"),
    ("median_tpot_ms", "TPOT median (ms)", "{:,.2f}"),
    ("mean_itl_ms", "ITL mean (ms)", "{:,.2f}"),
    ("output_throughput", "output tok/s", "{:,.1f}"),
    ("request_throughput", "requests/s", "{:,.3f}"),
)

#: What each bundle file is, for the card's file list (first match wins).
FILE_ROLES: tuple[tuple[str, str], ...] = (
    (CARD_NAME, "this model card"),
    (LAUNCH_SCRIPT_NAME, f"launch recipe; {ENV_DRY_RUN}=1 prints the resolved command without starting"),
    (LAUNCH_ENV_DOC_NAME, "every environment variable and KV-related flag with its rationale"),
    (COMPOSE_NAME, "docker compose service: GPUs, shared memory, mounts, healthcheck, restart policy"),
    (compose_name("head"), "docker compose service of the head host: Ray head and the server"),
    (compose_name("worker"), "docker compose service of a worker host: joins the head's Ray cluster"),
    (LAUNCH_HEAD_SCRIPT_NAME, "head host: Ray head, the wait for every host, then the server; stops when a host is lost"),
    (LAUNCH_WORKER_SCRIPT_NAME, "worker host: joins the head's Ray cluster (HEAD_ADDRESS)"),
    (LAUNCH_CLUSTER_NAME, "what the role scripts run: Ray start, the join wait, the lost-host watch"),
    (LAUNCH_MIDDLEWARE_NAME, "vLLM --middleware the launch loads: a shutdown ends open streams cleanly"),
    (f"{LAUNCH_K8S_DIR}/*", f"Kubernetes manifest of the same launch (Kubernetes {K8S_VERSION} schemas; a multi-host "
                            f"target's is a LeaderWorkerSet {LWS_RELEASE}), checked against the schemas, never on a cluster"),
    ("patches/series", "order in which the patches apply"),
    ("patches/*.diff", "engine patch"),
    ("patches/*.patch", "engine patch"),
    ("patches/*.py", "torch helper of the series: loads the patched ops standalone, references, test cases"),
    ("patches/*", "patch series file"),
    # fnmatch's * crosses '/', so sub-folders must be matched before the top-level patterns.
    ("evidence/kernels/*", "patched-kernel evidence: GPU tests, accuracy, benchmarks, compile reports (see its README.md)"),
    ("evidence/*/*", "supporting run (A/B, controls, cross-checks); the folder's files say how"),
    (f"evidence/{BENCH_EVIDENCE_GLOB}", "benchmark result (vLLM bench serve keys)"),
    ("evidence/*.json", "gate evidence: verdict, thresholds and raw records"),
    ("evidence/*", "evidence"),
    (f"{ATTESTATIONS_DIR}/{IMAGE_RECORD_NAME}", "the image this bundle was built for: tag and id"),
    (f"{ATTESTATIONS_DIR}/*{ENVELOPE_SUFFIX}", "DSSE envelope signing the image attestation it is named after"),
    (f"{ATTESTATIONS_DIR}/{SBOM_NAME}", "CycloneDX SBOM of the image"),
    (f"{ATTESTATIONS_DIR}/{PROVENANCE_NAME}", "in-toto provenance statement of the image"),
    (BENCHMARK_NAME, "streaming benchmark that produced the benchmark numbers"),
    (BUNDLE_MANIFEST_NAME, "manifest: target, engine, KV dtype, config digest, patch-series sha256"),
    (CHECKSUMS_NAME, "sha256 of every other file (`sha256sum -c --strict CHECKSUMS.sha256`)"),
)

#: What an evidence sub-folder holds when it has no README.md to say so (first match wins).
EVIDENCE_FOLDER_ROLES: tuple[tuple[str, str], ...] = (
    ("ab-*", "interleaved A/B benchmark of two server configs (per-pair deltas with spread)"),
    (ENGINE_AB_EVIDENCE, "engine A/B of int8, fp8 and bf16 KV, each served alone: medians and ratios with bootstrap "
                         "intervals over repeats (the card's Engine A/B table)"),
    ("kv-*", "the quality gates run against another KV dtype of the same model"),
    ("crosscheck", "this bundle's benchmark cross-checked against `vllm bench serve`"),
    ("*-refused", "server log: the engine refused this KV dtype on this host"),
    ("negative-control-*", "negative control: server log of a config that must not serve"),
    ("*", "supporting run; its files say how it was made"),
)
EVIDENCE_TOP_ROLE = "gate evidence (`<gate>.json`: verdict, thresholds, raw records) and benchmark results (`bench-*`)"


class GateRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    gate: str
    required: bool
    verdict: Literal["PASS", "FAIL"]
    summary: str
    measured: str
    config: Literal["this config", "another config", "unknown"]


class BenchRow(BaseModel):
    model_config = ConfigDict(frozen=True)
    workload: str
    source: str
    cells: dict[str, str]


class CardContext(BaseModel):
    """Everything the card template shows; numbers are already formatted strings."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    front_matter: str
    title: str
    cfg: ReleaseConfig
    plan: LaunchPlan
    version: str
    digest: str
    gates: list[GateRow]
    bench_headers: list[tuple[str, str]]
    bench: list[BenchRow]
    capacity: CapacitySection
    files: list[tuple[str, str]]
    #: (host role or "", docker run line): one line for one host, one per role for several.
    docker_runs: list[tuple[str, str]]
    claims: list[tuple[str, str]] = []
    compose_names: list[str] = [COMPOSE_NAME]
    #: Required gates without passing evidence ("needle (missing), ..."); None when all passed.
    gates_not_passed: str | None = None
    not_measured: str = NOT_MEASURED
    script_name: str = LAUNCH_SCRIPT_NAME
    env_doc_name: str = LAUNCH_ENV_DOC_NAME
    dry_run_env: str = ENV_DRY_RUN
    checksums_name: str = CHECKSUMS_NAME
    image: ImageRef | None = None
    signing_key_id: str | None = None
    signature_name: str = SIGNATURE_NAME
    public_key_name: str = PUBLIC_KEY_NAME
    #: What the quick start pip-installs to check the signature (verify_install_line).
    verify_install: str
    attestations_dir: str = ATTESTATIONS_DIR


def verify_install_line() -> str:
    """`pip install` arguments for upstream's verifier, at the versions this builder runs with (its
    host lock's): what the card's readers install is what the builder's own tests verify with."""
    return " ".join(f"{name}=={metadata.version(name)}" for name in CARD_VERIFY_PACKAGES)


def describe_file(rel: str) -> str:
    for pattern, role in FILE_ROLES:
        if fnmatch.fnmatchcase(rel, pattern):
            return role
    return ""


def _readme_heading(folder: Path | None) -> str | None:
    readme = folder / "README.md" if folder is not None else None
    if readme is None or not readme.is_file():
        return None
    heading = next((line[2:].strip() for line in readme.read_text().splitlines() if line.startswith("# ")), None)
    return heading or None


def file_rows(files: list[str], *, evidence_dir: Path, kernels_dir: Path | None) -> list[tuple[str, str]]:
    """One row per bundle file, except evidence: one row per evidence folder, saying what it holds
    (its README.md's heading where it has one)."""
    rows: list[tuple[str, str]] = []
    folders: dict[str, list[str]] = {}
    for rel in sorted(files):
        parts = rel.split("/")
        if parts[0] == "evidence" and len(parts) > 1:
            folders.setdefault("" if len(parts) == 2 else parts[1], []).append(rel)
        else:
            rows.append((f"`{rel}`", describe_file(rel)))
    for sub, members in sorted(folders.items()):
        count = f"{len(members)} file{'s' if len(members) != 1 else ''}"
        if not sub:
            role = _readme_heading(evidence_dir) or EVIDENCE_TOP_ROLE
            rows.append(("`evidence/`", f"{role} ({count} at the top level)"))
            continue
        # The target's own folders sit at the top of the bundle's evidence/; others keep their names.
        own = evidence_dir / sub
        source = kernels_dir if sub == "kernels" else own if own.is_dir() else evidence_dir.parent / sub
        role = _readme_heading(source) or next(r for p, r in EVIDENCE_FOLDER_ROLES if fnmatch.fnmatchcase(sub, p))
        rows.append((f"`evidence/{sub}/`", f"{role} ({count})"))
    return rows


def front_matter(cfg: ReleaseConfig, *, gates_passed: bool = True) -> str:
    tags = ["vllm", "kv-cache", cfg.kv_cache.dtype.replace("_", "-"), cfg.target.name, cfg.target.arch]
    if not gates_passed:  # Hub search shows it too
        tags.append(CARD_FAILED_GATES_TAG)
    meta = {
        "library_name": "vllm",
        "base_model": cfg.model.base_model,
        "license": cfg.model.license,
        "pipeline_tag": "text-generation",
        "tags": tags,
    }
    return yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)


def gate_rows(found: list[GateEvidence], *, digest: str) -> list[GateRow]:
    rows = []
    for g in found:
        match = "unknown" if g.config_digest is None else ("this config" if g.config_digest == digest else "another config")
        rows.append(
            GateRow(
                gate=g.gate,
                required=g.required,
                verdict="PASS" if g.verdict == "pass" else "FAIL",
                summary=g.summary or g.verdict,
                measured=g.created.date().isoformat(),
                config=match,
            )
        )
    return rows


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def bench_rows(evidence_dir: Path) -> tuple[list[tuple[str, str]], list[BenchRow]]:
    """Columns that at least one file measured, and one row per bench file; other cells say not measured."""
    raw: list[tuple[Path, dict]] = []
    for path in sorted(evidence_dir.glob(BENCH_EVIDENCE_GLOB)) if evidence_dir.is_dir() else []:
        try:
            data = json.loads(path.read_bytes())
        except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, or nested too deeply to parse
            raise RenderError(f"{path}: not valid JSON: {exc}", hint="re-run the benchmark or remove the file") from None
        if not isinstance(data, dict):
            raise RenderError(f"{path}: a benchmark file must hold a JSON object", hint="re-run the benchmark")
        raw.append((path, data))
    columns = [(key, head, fmt) for key, head, fmt in BENCH_COLUMNS if any(_number(d.get(key)) is not None for _, d in raw)]
    rows = []
    for path, data in raw:
        cells = {}
        for key, _, fmt in columns:
            n = _number(data.get(key))
            cells[key] = NOT_MEASURED if n is None else fmt.format(n)
        label = data.get("workload")
        rows.append(
            BenchRow(
                workload=label if isinstance(label, str) and label else path.stem.removeprefix("bench-"),
                source=path.name,
                cells=cells,
            )
        )
    return [(key, head) for key, head, _ in columns], rows


def card_context(
    *, cfg: ReleaseConfig, plan: LaunchPlan, evidence_dir: Path, files: list[str],
    capacity: CapacityPlan | None = None, capacity_error: str | None = None, kernels_dir: Path | None = None,
    image: ImageRef | None = None, signing_key_id: str | None = None,
) -> CardContext:
    """`files`: bundle-relative paths the card lists; `evidence_dir`: the target's evidence folder;
    `capacity`: builder.plan's plan of the target (or why there is none); `kernels_dir`: the kernel
    evidence the bundle ships, when it ships it."""
    digest = config_digest(cfg)
    headers, bench = bench_rows(evidence_dir)
    found = load_gate_evidence(evidence_dir) if evidence_dir.is_dir() else []
    gates = gate_rows(found, digest=digest)
    # Said in the card as built, so a signed bundle needs no change to be published with the notice.
    release_gates = gate_report(found)
    return CardContext(
        front_matter=front_matter(cfg, gates_passed=release_gates.ok),
        gates_not_passed=None if release_gates.ok else describe_blocking(release_gates),
        title=f"{cfg.model.served_name}: {cfg.kv_cache.dtype} KV cache on {cfg.target.name}",
        cfg=cfg,
        plan=plan,
        version=builder.__version__,
        digest=digest,
        gates=gates,
        bench_headers=headers,
        bench=bench,
        capacity=capacity_section(capacity, plan_error=capacity_error, evidence_dir=evidence_dir, kernels_dir=kernels_dir,
                                  hosts=hosts_for_card(cfg, capacity)),
        files=file_rows(files, evidence_dir=evidence_dir, kernels_dir=kernels_dir),
        docker_runs=[("", docker_run_line(plan))] if plan.cluster is None
        else [(role, docker_run_line(plan, role=role)) for role in ROLES],
        compose_names=[COMPOSE_NAME] if plan.cluster is None else [compose_name(role) for role in ROLES],
        claims=claim_rows(evidence_dir.parent, cfg.target.name),
        image=image,
        signing_key_id=signing_key_id,
        verify_install=verify_install_line(),
    )


def claim_rows(evidence_root: Path, target: str) -> list[tuple[str, str]]:
    """(claim as stated, how it was measured) for each claim of the ledger that applies to ``target``;
    none where the evidence has no ledger."""
    if not (evidence_root / CLAIMS_FILE).is_file():
        return []
    return [(c.text(), f"{c.date}, {c.hardware}; {c.software}; `{c.command}`") for c in load_ledger(evidence_root).for_target(target)]


def hosts_for_card(cfg: ReleaseConfig, capacity: CapacityPlan | None) -> HostsComparison | None:
    """The comparison with cluster.single_host; None without one, or when either cannot be planned."""
    if capacity is None:
        return None
    try:
        return plan_against_single_host(cfg, capacity)
    except BuilderError:
        return None


def plan_for_card(cfg: ReleaseConfig) -> tuple[CapacityPlan | None, str | None]:
    """builder.plan's plan of the target as it launches, or why there is none (the card says so)."""
    try:
        return plan_target(cfg), None
    except BuilderError as exc:
        return None, exc.message


def render_card(ctx: CardContext, *, env: jinja2.Environment | None = None) -> str:
    env = env or make_environment()
    return render_template(env, "README.md.j2", {"card": ctx, "engine": ctx.cfg.engine.resolved})

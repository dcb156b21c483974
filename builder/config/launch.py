"""The launch plan: the vLLM flags and environment a config resolves to, each with its reason.

The launch script, ENV.md and `builder serve` all consume this one plan, and every reason is
taken from a config field description, so the docs cannot drift from what runs.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from builder.config.container import ContainerPlan, container_plan
from builder.config.models import (
    PLE,
    Cluster,
    KVCache,
    Model,
    Parallel,
    ReleaseConfig,
    Server,
    Speculative,
)
from builder.config.overrides import LaunchOverrides
from builder.config.ple import PLE_TABLE_DIR_ENV, engine_maps_ple, maps_ple_table
from builder.constants import ENV_HEAD_ADDRESS, ENV_NODE_IP, LAUNCH_MIDDLEWARE_CLASS

MODEL_DIR_ENV = "MODEL_DIR"
"""The input every launch needs from its caller: where the pinned snapshot lies."""

#: "target": from the target file, rendered into the launch script and baked into the image;
#: "serve": added for one `builder serve` run, passed to the container at run time.
Origin = Literal["target", "serve"]


class Flag(BaseModel):
    model_config = ConfigDict(frozen=True)
    flag: str
    value: str | None = Field(default=None, description="None for a switch.")
    why: str
    kv_related: bool = False
    origin: Origin = "target"


class EnvVar(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    value: str
    why: str
    origin: Origin = "target"


class RequiredInput(BaseModel):
    model_config = ConfigDict(frozen=True)
    env: str
    why: str
    is_dir: bool = True
    writable: bool = False
    example: str = "/path/to/snapshot"


class ClusterPort(BaseModel):
    model_config = ConfigDict(frozen=True)
    port: str = Field(description="A port or a range lo-hi (TCP).")
    where: Literal["head", "every node"]
    why: str


class ClusterPlan(BaseModel):
    """How the hosts of a multi-node target form one Ray cluster that the engine spans."""

    model_config = ConfigDict(frozen=True)
    nodes: int
    gpus_per_node: int = Field(description="GPUs each host gives Ray; 0 on CPU hosts.")
    interface: str
    ray_port: int
    join_timeout_s: int
    lost_node_timeout_s: int
    head_address_env: str = Field(description="What the worker script reads: the head host's address on the link.")
    node_ip_env: str = Field(description="Optional on each host: its own address, else the interface's first IPv4.")
    ray_start_args: list[str] = Field(description="`ray start` flags every host passes (head and worker add their own).")
    env: list[EnvVar] = Field(description="Network variables both role scripts export, each with its reason.")
    ports: list[ClusterPort]

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class LaunchPlan(BaseModel):
    """What `python -m <module>` is started with."""

    model_config = ConfigDict(frozen=True)
    module: str
    flags: list[Flag]
    env: list[EnvVar]
    required: list[RequiredInput]
    warnings: list[str] = Field(
        default_factory=list, description="Known gaps between the config and what the engine can do."
    )
    container: ContainerPlan
    cluster: ClusterPlan | None = Field(default=None, description="Set when the target spans several hosts.")

    def argv(self, *, model_path: str) -> list[str]:
        out = ["python3", "-m", self.module, "--model", model_path]
        return out + _words(self.flags)

    def serve_args(self) -> list[str]:
        """The flags `builder serve` adds for one run: appended after the image name, the launch script appends them."""
        return _words(f for f in self.flags if f.origin == "serve")

    def serve_env(self) -> dict[str, str]:
        return {e.name: e.value for e in self.env if e.origin == "serve"}


def _words(flags) -> list[str]:
    out: list[str] = []
    for f in flags:
        out.append(f.flag)
        if f.value is not None:
            out.append(f.value)
    return out


def _server_entries(*, cors_origins: list[str], log_level: str | None, origin: Origin) -> tuple[list[Flag], list[EnvVar]]:
    flags: list[Flag] = []
    env: list[EnvVar] = []
    if cors_origins:
        flags.append(Flag(flag="--allowed-origins", value=json.dumps(cors_origins, separators=(",", ":")),
                          why=_why(Server, "cors_origins"), origin=origin))
    if log_level is not None:
        flags.append(Flag(flag="--uvicorn-log-level", value=log_level, why=_why(Server, "log_level"), origin=origin))
        env.append(EnvVar(name="VLLM_LOGGING_LEVEL", value=log_level.upper(), why=_why(Server, "log_level"), origin=origin))
    return flags, env


def _why(model: type[BaseModel], field: str) -> str:
    return model.model_fields[field].description or field


def cluster_plan(cfg: ReleaseConfig) -> ClusterPlan | None:
    """The Ray layout of a target with cluster.nodes > 1; None for one host."""
    c, t = cfg.cluster, cfg.target
    if c.nodes == 1:
        return None
    link = f"the {c.interface} link between the hosts"
    env = [
        EnvVar(name="GLOO_SOCKET_IFNAME", value=c.interface,
               why=f"torch.distributed (gloo) binds to {link}, not the first interface it finds. " + _why(Cluster, "interface")),
    ]
    if t.gpu_count:
        env.append(EnvVar(name="NCCL_SOCKET_IFNAME", value=c.interface,
                          why=f"NCCL bootstraps over {link}; it still uses RDMA on that port where it finds it (RoCE on ConnectX-7)."))
    ports = [
        ClusterPort(port=str(c.ray_port), where="head", why=_why(Cluster, "ray_port")),
        ClusterPort(port=str(c.node_manager_port), where="every node", why=_why(Cluster, "node_manager_port")),
        ClusterPort(port=str(c.object_manager_port), where="every node", why=_why(Cluster, "object_manager_port")),
        ClusterPort(port=f"{c.min_worker_port}-{c.max_worker_port}", where="every node",
                    why="Ray worker processes (the engine's workers run in them)."),
        ClusterPort(port="any", where="every node",
                    why="torch.distributed's rendezvous and NCCL/gloo connections use ports the OS picks: allow all TCP "
                    f"between the hosts on {c.interface} (a direct cable needs no firewall rule), and nothing else from outside."),
        ClusterPort(port=str(cfg.server.port), where="head", why="The OpenAI-compatible server, for clients."),
    ]
    return ClusterPlan(
        nodes=c.nodes, gpus_per_node=t.gpu_count, interface=c.interface, ray_port=c.ray_port,
        join_timeout_s=c.join_timeout_s, lost_node_timeout_s=c.lost_node_timeout_s,
        head_address_env=ENV_HEAD_ADDRESS, node_ip_env=ENV_NODE_IP,
        ray_start_args=[
            f"--node-manager-port={c.node_manager_port}", f"--object-manager-port={c.object_manager_port}",
            f"--min-worker-port={c.min_worker_port}", f"--max-worker-port={c.max_worker_port}",
            f"--num-gpus={t.gpu_count}", "--disable-usage-stats",
        ],
        env=env,
        ports=ports,
    )


def launch_plan(
    cfg: ReleaseConfig, *, overrides: LaunchOverrides | None = None, series: Collection[str] | None = None
) -> LaunchPlan:
    """The target's plan; with ``overrides``, plus the entries of one `builder serve` run (origin "serve").

    ``series`` (patch names) defaults to bundle/patches/series: it decides whether the PLE table is mapped.
    """
    m, kv, par, spec, ple, srv = cfg.model, cfg.kv_cache, cfg.parallel, cfg.speculative, cfg.ple, cfg.server
    container = container_plan(cfg, series=series)
    engine = cfg.engine.resolved
    required = [RequiredInput(env=MODEL_DIR_ENV, why=f"Local snapshot of {m.repo_id}@{m.revision}.")]
    flags: list[Flag] = [
        Flag(flag="--served-model-name", value=m.served_name, why=_why(Model, "served_name")),
        Flag(flag="--host", value=srv.host, why=_why(Server, "host")),
        Flag(flag="--port", value=str(srv.port), why=_why(Server, "port")),
        Flag(flag="--max-model-len", value=str(srv.max_model_len), why=_why(Server, "max_model_len")),
        Flag(
            flag="--kv-cache-dtype", value=kv.dtype, why=_why(KVCache, "dtype"), kv_related=True
        ),
        Flag(
            flag="--gpu-memory-utilization",
            value=f"{srv.gpu_memory_utilization:g}",
            why=_why(Server, "gpu_memory_utilization") + " The KV pool is what remains after weights.",
            kv_related=True,
        ),
    ]
    if srv.max_num_seqs is not None:
        flags.append(Flag(flag="--max-num-seqs", value=str(srv.max_num_seqs), why=_why(Server, "max_num_seqs")))
    if par.tensor_parallel_size > 1:
        flags.append(
            Flag(flag="--tensor-parallel-size", value=str(par.tensor_parallel_size), why=_why(Parallel, "tensor_parallel_size"))
        )
    if par.pipeline_parallel_size > 1:
        flags.append(
            Flag(
                flag="--pipeline-parallel-size",
                value=str(par.pipeline_parallel_size),
                why=_why(Parallel, "pipeline_parallel_size"),
            )
        )
    if par.enable_expert_parallel:
        flags.append(Flag(flag="--enable-expert-parallel", why=_why(Parallel, "enable_expert_parallel")))
    if par.distributed_executor_backend is not None:
        flags.append(
            Flag(
                flag="--distributed-executor-backend",
                value=par.distributed_executor_backend,
                why=_why(Parallel, "distributed_executor_backend"),
            )
        )
    if spec.method is not None:
        flags.append(
            Flag(
                flag="--speculative-config",
                value=json.dumps(
                    {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens},
                    separators=(",", ":"),
                ),
                why=_why(Speculative, "num_speculative_tokens"),
                kv_related=True,
            )
        )
    if m.reasoning_parser:
        flags.append(Flag(flag="--reasoning-parser", value=m.reasoning_parser, why=_why(Model, "reasoning_parser")))
    if m.reasoning_effort:
        flags.append(
            Flag(
                flag="--default-chat-template-kwargs",
                value=json.dumps({"reasoning_effort": m.reasoning_effort}, separators=(",", ":")),
                why=_why(Model, "reasoning_effort"),
            )
        )
    if m.language_model_only:
        flags.append(Flag(flag="--language-model-only", why=_why(Model, "language_model_only")))
    if srv.enforce_eager:
        flags.append(Flag(flag="--enforce-eager", why=_why(Server, "enforce_eager")))

    warnings: list[str] = []
    env: list[EnvVar] = [
        EnvVar(name="HF_HUB_OFFLINE", value="1", why="Serving must never reach the Hub; weights come from MODEL_DIR."),
    ]
    if srv.allow_long_max_model_len:
        env.append(
            EnvVar(name="VLLM_ALLOW_LONG_MAX_MODEL_LEN", value="1", why=_why(Server, "allow_long_max_model_len"))
        )
    if ple.present:
        if engine.ple_style == "env":
            env.append(EnvVar(name="VLLM_PLE_CPU_OFFLOAD", value="1" if ple.cpu_offload else "0", why=_why(PLE, "cpu_offload")))
            env.append(EnvVar(name="VLLM_PLE_MMAP_TABLE", value="1" if ple.mmap_table else "0", why=_why(PLE, "mmap_table")))
            if ple.ready_timeout_s is not None:
                env.append(
                    EnvVar(
                        name="VLLM_PLE_OFFLOAD_READY_TIMEOUT", value=str(ple.ready_timeout_s), why=_why(PLE, "ready_timeout_s")
                    )
                )
        elif engine.ple_style == "engram":
            # 0.33.0's EngramConfig knows cpu_offload (pinned host table); the ple-mmap patch adds
            # mmap_table. It has no PLE-specific ready timeout; the engine-wide one is the closest.
            engram: dict[str, bool] = {"cpu_offload": ple.cpu_offload}
            why = "Upstream 0.33 reads PLE offload from --engram-config. " + _why(PLE, "cpu_offload")
            if maps_ple_table(cfg, series=series):
                engram["mmap_table"] = True
                why += (
                    f" mmap_table (from the {engine.ple_mmap_patch} patch): " + _why(PLE, "mmap_table")
                    + f" Table files go to {PLE_TABLE_DIR_ENV}. Lookups read the mapping from the GPU where it "
                    "has pageable memory access (GB10), else copy the rows through a small pinned staging buffer "
                    "on the prefetch stream; the engine logs which."
                )
                required.append(
                    RequiredInput(
                        env=PLE_TABLE_DIR_ENV,
                        why="Writable directory for the PLE table files the engine builds when the "
                        "checkpoint's table cannot be mapped in place (another dtype): one file per "
                        "PLE layer and TP rank, up to the table's size in all (~102 GB at TP1), built "
                        "once and reused while the checkpoint is unchanged. Nothing is written when the "
                        "table maps in place. Files of an older checkpoint stay until you delete them (safe "
                        "while no server runs).",
                        writable=True,
                        example="/path/to/ple-tables",
                    )
                )
            flags.append(
                Flag(flag="--engram-config", value=json.dumps(engram, separators=(",", ":")), why=why)
            )
            if ple.ready_timeout_s is not None:
                env.append(
                    EnvVar(
                        name="VLLM_ENGINE_READY_TIMEOUT_S",
                        value=str(ple.ready_timeout_s),
                        why=_why(PLE, "ready_timeout_s") + " Upstream 0.33 only has the engine-wide timeout.",
                    )
                )
        if ple.mmap_table and not engine_maps_ple(cfg, series=series):
            warnings.append(
                f"engine {engine.id} cannot memory-map the PLE table here (its engram config only pins it in "
                f"host RAM, and the patch series applied lacks {engine.ple_mmap_patch or 'an mmap patch'}), but "
                f"ple.mmap_table is set because target.host_ram_gib = {cfg.target.host_ram_gib:g} GiB "
                "is below the ~135 GiB a pinned table needs. Expect the model load to run out of host memory "
                "on this engine; the seed bundle's measured run used the fork preview's VLLM_PLE_MMAP_TABLE=1."
            )
    if par.distributed_executor_backend == "ray" and engine.ray_executor_gap:
        warnings.append(
            f"{engine.ray_executor_gap}. The hosts join one Ray cluster "
            "and the head starts the server, which then stops with that error: this layout tests the multi-host "
            "bring-up, it does not serve."
        )
    if cfg.target.gpu_arch == "sm_121":
        env += [
            EnvVar(name="VLLM_USE_DEEP_GEMM", value="0", why="DeepGEMM faults on sm_121 (GB10)."),
            EnvVar(name="CUTE_DSL_ARCH", value="sm_121a", why="CuTe DSL kernels must target sm_121a on GB10."),
            EnvVar(name="MAX_JOBS", value="2", why="JIT builds can exhaust GB10's unified memory."),
        ]
    flags.append(
        Flag(flag="--shutdown-timeout", value=str(container.drain_s),
             why=f"On SIGTERM in-flight requests may finish for {container.drain_s} s before the engine stops.")
    )
    flags.append(
        Flag(flag="--middleware", value=LAUNCH_MIDDLEWARE_CLASS,
             why="Once the server is exiting, ends responses still open (streams get an error event and [DONE]) "
                 "instead of leaving uvicorn waiting on them until SIGKILL.")
    )
    more_flags, more_env = _server_entries(cors_origins=srv.cors_origins, log_level=srv.log_level, origin="target")
    flags += more_flags
    env += more_env
    env += [EnvVar(name=k, value=v, why="Set by server.extra_env in the target file.") for k, v in srv.extra_env.items()]
    flags += [Flag(flag=a, why="Set by server.extra_args in the target file.") for a in srv.extra_args]
    if overrides is not None:
        more_flags, more_env = _server_entries(
            cors_origins=overrides.cors_origins, log_level=overrides.log_level, origin="serve"
        )
        flags += more_flags
        env += more_env
        env += [EnvVar(name=k, value=v, why="Set by builder serve --env.", origin="serve") for k, v in overrides.env.items()]
        flags += [Flag(flag=a, why="Set by builder serve -- FLAGS.", origin="serve") for a in overrides.extra_args]

    return LaunchPlan(
        cluster=cluster_plan(cfg),
        module=engine.api_server_module,
        flags=flags,
        env=env,
        required=required,
        warnings=warnings,
        container=container,
    )

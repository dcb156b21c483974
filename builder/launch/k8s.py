"""Kubernetes manifests of a target, from its launch plan: what compose.yaml runs, for a cluster.

One host: a Deployment and a ClusterIP Service. Several hosts (plan.cluster): a LeaderWorkerSet
whose leader runs the Ray head and the server, its workers the Ray workers, and a Service that
selects the leader. Like compose.yaml the files hold no path of this machine and no secret: the
model and the PLE table files come from PersistentVolumeClaims the user creates, the API key from
an optional Secret.
"""

from __future__ import annotations

import math
import re

import yaml

import builder
from builder.config import LaunchPlan, ReleaseConfig
from builder.config.launch import MODEL_DIR_ENV, ClusterPlan
from builder.constants import ENV_VLLM_API_KEY, IMAGE_REPO, K8S_VERSION, LAUNCH_K8S_DIR, LWS_RELEASE
from builder.errors import RenderError

DEPLOYMENT_NAME = f"{LAUNCH_K8S_DIR}/deployment.yaml"
SERVICE_NAME = f"{LAUNCH_K8S_DIR}/service.yaml"
LWS_NAME = f"{LAUNCH_K8S_DIR}/leaderworkerset.yaml"

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
#: Labels the LeaderWorkerSet controller puts on its pods; index 0 is the leader.
LWS_SET_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: What the LeaderWorkerSet controller sets in every pod of a group (first in the env list, so
#: later entries can refer to it): the leader pod's DNS name.
LWS_LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"

GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER = "vllm"
PORT_NAME = "http"
SHM_VOLUME = "dshm"
#: /dev/shm of a GPU pod. Docker gives GPU containers the host's IPC namespace and its /dev/shm;
#: a pod's counterpart (hostIPC) is refused by Pod Security "baseline", and vLLM needs only room
#: in /dev/shm for its broadcast queue and tensor arena (NCCL adds its buffers with TP > 1).
GPU_SHM_SIZE = "16Gi"
#: The pod network's interface: a cluster interface named otherwise is a host NIC (the link
#: between the hosts), which a pod sees only on the host network.
POD_INTERFACE = "eth0"

#: Probe timing. Readiness and liveness poll as compose's healthcheck does (15 s, 3 misses); the
#: startup probe polls every 10 s for as long as the model may take to load.
PROBE_PERIOD_S = 15
PROBE_FAILURES = 3
STARTUP_PERIOD_S = 10
#: `healthcheck --ready` makes two requests of at most 4 s each.
READY_TIMEOUT_S = 10
HTTP_TIMEOUT_S = 5

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def k8s_manifests(cfg: ReleaseConfig, plan: LaunchPlan) -> dict[str, str]:
    """{bundle-relative path: YAML text} under launch/k8s/, one object per file."""
    names = _Names(cfg, plan)
    cluster = plan.cluster
    if cluster is None:
        workload = (DEPLOYMENT_NAME, _deployment(plan, names))
    else:
        workload = (LWS_NAME, _leader_worker_set(plan, cluster, names))
    service = (SERVICE_NAME, _service(plan, names, leader_only=cluster is not None))
    return {path: _header(cfg, plan, names, obj) + _dump(obj) for path, obj in (workload, service)}


class _Names:
    """Object names: the workload and its Service after the container name, claims and Secret beside them."""

    def __init__(self, cfg: ReleaseConfig, plan: LaunchPlan) -> None:
        box = plan.container
        self.workload = box.name
        # A LeaderWorkerSet makes a headless Service of its own name, so the API Service takes a suffix.
        self.service = f"{box.name}-api"
        for name in (self.workload, self.service):
            if len(name) > 63 or not _DNS_LABEL.match(name):
                raise RenderError(
                    f"Kubernetes name {name!r} (from target.name {cfg.target.name!r}) is not a DNS-1035 label: "
                    "at most 63 characters, lowercase letters, digits and '-', starting with a letter and "
                    "ending with a letter or digit",
                    hint=f"shorten target.name to at most {63 - len(self.service) + len(cfg.target.name)} characters "
                    "and end it with a letter or digit",
                )
        # The snapshot is the same for every target serving this model: one read-only claim they can share.
        self.model_claim = f"{_dns_subdomain(cfg.model.served_name) or box.name}-model"
        self.secret = f"{box.name}-env"
        self.volumes = [_dns_subdomain(m.path.rstrip("/").rsplit("/", 1)[-1]).replace(".", "-") or f"mount-{i}"
                        for i, m in enumerate(box.mounts)]
        # Other mounts (the PLE table files) are written by this workload: claims of its own.
        self.claims = [self.model_claim if m.container_env == MODEL_DIR_ENV else f"{box.name}-{self.volumes[i]}"
                       for i, m in enumerate(box.mounts)]

    def labels(self, component: str) -> dict[str, str]:
        return self.selector | {
            "app.kubernetes.io/version": _label_value(builder.__version__),
            "app.kubernetes.io/component": component,
        }

    @property
    def selector(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": IMAGE_REPO, "app.kubernetes.io/instance": self.workload}


def _dns_subdomain(text: str) -> str:
    """`text` as a DNS-1123 subdomain: lowercase, dot-separated labels of letters, digits and '-'."""
    labels = (re.sub(r"[^a-z0-9]+", "-", part).strip("-") for part in text.lower().split("."))
    return ".".join(label for label in labels if label)[:200].strip(".-")


def _label_value(text: str) -> str:
    return _LABEL_VALUE.sub("_", text)[:63].strip("._-")


def _k8s_quantity(docker_size: str) -> str:
    """A docker size (1g, 512m: binary units) as a Kubernetes quantity (1Gi, 512Mi)."""
    m = re.fullmatch(r"(\d+)([bkmg]?)", docker_size.strip().lower())
    if m is None:
        raise RenderError(
            f"shared-memory size {docker_size!r} is not a docker size",
            hint="write it as a number with an optional unit b, k, m or g (e.g. 1g)",
        )
    number, unit = m.groups()
    return number + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def _env(plan: LaunchPlan, names: _Names, *, secrets: bool) -> list[dict]:
    box = plan.container
    env: list[dict] = [{"name": k, "value": v} for k, v in box.environment.items()]
    if secrets:
        # By name from an optional Secret, as docker passes them from the caller's shell: no Secret, no key.
        env += [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": names.secret, "key": name, "optional": True}}}
            for name in box.passthrough_env
        ]
    return env


def _container(plan: LaunchPlan, names: _Names, *, gpus: int, env: list[dict], serves: bool,
               startup_s: int, args: list[str] | None = None, extra_ports: list[dict] | None = None) -> dict:
    box = plan.container
    c: dict = {"name": CONTAINER, "image": box.image}
    if args:
        c["args"] = args
    if serves:
        c["ports"] = [{"name": PORT_NAME, "containerPort": box.port, "protocol": "TCP"}, *(extra_ports or [])]
    elif extra_ports:
        c["ports"] = extra_ports
    c["env"] = env
    if gpus:
        c["resources"] = {"limits": {GPU_RESOURCE: gpus}}
    c["volumeMounts"] = [
        {"name": vol, "mountPath": m.path, "readOnly": m.read_only} for vol, m in zip(names.volumes, box.mounts)
    ] + [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]
    if box.cap_add:
        c["securityContext"] = {"capabilities": {"add": list(box.cap_add)}}
    if serves:
        health = {"path": "/health", "port": box.port}
        c["startupProbe"] = {
            "httpGet": health, "periodSeconds": STARTUP_PERIOD_S, "timeoutSeconds": HTTP_TIMEOUT_S,
            "failureThreshold": math.ceil(startup_s / STARTUP_PERIOD_S),
        }
        c["readinessProbe"] = {
            "exec": {"command": ["healthcheck", "--ready"]},
            "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": READY_TIMEOUT_S, "failureThreshold": PROBE_FAILURES,
        }
        c["livenessProbe"] = {
            "httpGet": health, "periodSeconds": PROBE_PERIOD_S, "timeoutSeconds": HTTP_TIMEOUT_S,
            "failureThreshold": PROBE_FAILURES,
        }
    return c


def _volumes(plan: LaunchPlan, names: _Names) -> list[dict]:
    box = plan.container
    volumes = [
        {"name": vol, "persistentVolumeClaim": {"claimName": claim, "readOnly": m.read_only}}
        for vol, claim, m in zip(names.volumes, names.claims, box.mounts)
    ]
    volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(plan)}})
    return volumes


def shm_size(plan: LaunchPlan) -> str:
    """The /dev/shm size limit: the CPU container's --shm-size, else GPU_SHM_SIZE."""
    box = plan.container
    return _k8s_quantity(box.shm_size) if box.shm_size else GPU_SHM_SIZE


def _pod(plan: LaunchPlan, names: _Names, container: dict, *, host_network: bool = False) -> dict:
    pod: dict = {
        # Service links would add <SERVICE>_PORT variables, and vLLM reads VLLM_PORT: a Service named
        # vllm in the namespace would break the engine's start.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": plan.container.stop_timeout_s,
    }
    if host_network:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"  # the leader's address is a cluster DNS name
    pod["containers"] = [container]
    pod["volumes"] = _volumes(plan, names)
    return pod


def _deployment(plan: LaunchPlan, names: _Names) -> dict:
    box = plan.container
    container = _container(plan, names, gpus=box.gpus, env=_env(plan, names, secrets=True), serves=True,
                           startup_s=box.health_start_period_s)
    labels = names.labels("server")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.workload, "labels": labels},
        "spec": {
            "replicas": 1,
            # The old pod holds the GPUs and the PLE claim until it stops: a rolling update would wait on both.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": names.selector},
            "template": {"metadata": {"labels": labels}, "spec": _pod(plan, names, container)},
        },
    }


def _leader_worker_set(plan: LaunchPlan, cluster: ClusterPlan, names: _Names) -> dict:
    box = plan.container
    net = [{"name": e.name, "value": e.value} for e in cluster.env]
    host_network = cluster.interface != POD_INTERFACE
    leader = _container(
        plan, names, gpus=cluster.gpus_per_node, env=_env(plan, names, secrets=True) + net, serves=True,
        # The head waits for every worker to join before the model load starts.
        startup_s=cluster.join_timeout_s + box.health_start_period_s, args=["head"],
        extra_ports=[{"name": "ray", "containerPort": cluster.ray_port, "protocol": "TCP"}],
    )
    worker = _container(
        plan, names, gpus=cluster.gpus_per_node, serves=False, startup_s=0, args=["worker"],
        env=_env(plan, names, secrets=False) + net
        + [{"name": cluster.head_address_env, "value": f"$({LWS_LEADER_ADDRESS_ENV})"}],
    )
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": names.workload, "labels": names.labels("server")},
        "spec": {
            "replicas": 1,
            # The leader is ready only once the workers have joined: it must not wait for readiness to start them.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": cluster.nodes,
                # One engine spans the group: a lost pod leaves the rest unable to serve, so all restart together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": names.labels("head")},
                    "spec": _pod(plan, names, leader, host_network=host_network),
                },
                "workerTemplate": {
                    "metadata": {"labels": names.labels("worker")},
                    "spec": _pod(plan, names, worker, host_network=host_network),
                },
            },
        },
    }


def _service(plan: LaunchPlan, names: _Names, *, leader_only: bool) -> dict:
    selector = dict(names.selector)
    if leader_only:
        selector |= {LWS_SET_LABEL: names.workload, LWS_WORKER_INDEX_LABEL: "0"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.service, "labels": names.labels("server")},
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": PORT_NAME, "port": plan.container.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def _header(cfg: ReleaseConfig, plan: LaunchPlan, names: _Names, obj: dict) -> str:
    box, cluster = plan.container, plan.cluster
    what = "a LeaderWorkerSet" if obj["kind"] == "LeaderWorkerSet" else f"a {obj['kind']}"
    claims = list(zip(names.claims, box.mounts))
    lines = [
        f"{cfg.target.name}: the served image with the settings of launch/ENV.md, as {what} (generated; do not edit).",
        f"Checked against the Kubernetes {K8S_VERSION} API schemas"
        + (f" and the LeaderWorkerSet {LWS_RELEASE} CRD (install LWS first)." if cluster is not None else "."),
        f"Before `kubectl apply -f {LAUNCH_K8S_DIR}/`, create in the namespace:",
    ]
    for claim, m in claims:
        if m.container_env == MODEL_DIR_ENV:
            lines.append(f"  PersistentVolumeClaim {claim}: the snapshot of {cfg.model.repo_id}@{cfg.model.revision} "
                         f"at its root (config.json at the top), mounted read-only at {m.path}"
                         + (", ReadOnlyMany: every host of the group mounts it" if cluster is not None else ""))
        elif m.read_only:
            lines.append(f"  PersistentVolumeClaim {claim}: mounted read-only at {m.path} ({m.container_env})"
                         + (", ReadOnlyMany: every host of the group mounts it" if cluster is not None else ""))
        else:
            lines.append(f"  PersistentVolumeClaim {claim}: mounted read-write at {m.path} ({m.container_env}), "
                         "where the engine writes files"
                         + (", ReadWriteMany: every host writes its own files" if cluster is not None else ""))
    lines.append(
        f"  Secret {names.secret} (optional): key {ENV_VLLM_API_KEY}, the server's API key; without it the API is open."
    )
    lines.append(f"Service {names.service} answers on port {box.port} inside the cluster.")
    if obj["kind"] in ("Deployment", "LeaderWorkerSet"):
        if box.ipc_host:
            lines += [
                f"/dev/shm is a memory-backed emptyDir ({shm_size(plan)}): docker's --ipc host has no pod counterpart that",
                "Pod Security 'baseline' admits (hostIPC), and vLLM needs only room in /dev/shm for its shared-memory queues.",
            ]
        else:
            lines.append(f"/dev/shm is a memory-backed emptyDir ({shm_size(plan)}), as docker's --shm-size {box.shm_size}: "
                         "a container's own /dev/shm is 64 MiB.")
        lines += [
            "Probes: startup = /health while the model loads; readiness = `healthcheck --ready` (/health, then",
            f"/v1/models lists the served model, asked with {ENV_VLLM_API_KEY} when set, as `builder wait` decides);",
            "liveness = /health (503 once the engine died).",
        ]
        if box.cap_add:
            lines.append(f"Adds {', '.join(box.cap_add)} (PLE offload worker): the namespace must allow it (Pod Security 'privileged').")
        if cluster is not None and cluster.interface != POD_INTERFACE:
            lines.append(
                f"Host network: Ray, gloo and NCCL use the hosts' {cluster.interface} link, which a pod sees only there."
            )
    return "".join(f"# {line}\n" for line in lines)


class _NoAliases(yaml.SafeDumper):
    """Shared dicts (labels, a probe's target) written out each time: no &anchors for a reader to follow."""

    def ignore_aliases(self, data) -> bool:
        return True


def _dump(obj: dict) -> str:
    return yaml.dump(obj, Dumper=_NoAliases, sort_keys=False, default_flow_style=False, width=1000)

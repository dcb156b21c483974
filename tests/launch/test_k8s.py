"""The Kubernetes manifests of every target validate against the official schemas and agree with
the launch plan; each check is shown to catch a broken manifest (a mutant) that the real one is not.

Schemas: Kubernetes K8S_VERSION as kubernetes-validate ships it (its strict variant refuses unknown
fields, as `kubectl apply` does by default), and the LeaderWorkerSet LWS_RELEASE CRD kept in
fixtures/. No cluster is involved: what a schema cannot know (a probe aimed at another port, a GPU
pod without a GPU) is checked against the plan here.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import textwrap
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import ValidationError as K8sValidationError

from builder.config import available_targets, launch_plan, load_target
from builder.constants import K8S_VERSION, LAUNCH_K8S_DIR, LWS_RELEASE, REPO_ROOT
from builder.launch.k8s import (
    DEPLOYMENT_NAME,
    GPU_RESOURCE,
    LWS_API_VERSION,
    LWS_NAME,
    LWS_SET_LABEL,
    LWS_WORKER_INDEX_LABEL,
    SERVICE_NAME,
    k8s_manifests,
)

TARGETS = available_targets()
FIXTURES = Path(__file__).parent / "fixtures"
LWS_SCHEMA = FIXTURES / f"lws-{LWS_RELEASE}-openapiv3.yaml"
HEALTHCHECK = REPO_ROOT / "docker" / "healthcheck"


def rendered(name: str):
    cfg = load_target(name)
    plan = launch_plan(cfg)
    files = k8s_manifests(cfg, plan)
    return cfg, plan, {path: yaml.safe_load(text) for path, text in files.items()}


# --- validation -----------------------------------------------------------------------------------


def validate_k8s(obj: dict) -> None:
    """Kubernetes' own schema for the object's kind at K8S_VERSION, unknown fields refused."""
    assert kubernetes_validate.validate(obj, K8S_VERSION, strict=True) == K8S_VERSION


def _closed(schema):
    """The CRD schema with unknown fields refused where it lists the fields.

    A CRD's structural schema leaves additionalProperties out and the API server prunes unknown
    fields, or refuses them under kubectl's default --validate=strict (server-side field
    validation). Plain JSON Schema would accept them, so a misspelled field would pass unseen.
    """
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties"):
            out[key] = {name: _closed(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = _closed(value)
        else:
            out[key] = value
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def _lws_schema_raw() -> dict:
    return yaml.safe_load(LWS_SCHEMA.read_text())


LWS_VALIDATOR = jsonschema.Draft7Validator(_closed(_lws_schema_raw()))


def validate_lws(obj: dict) -> None:
    """The LeaderWorkerSet CRD's schema, then each pod template against Kubernetes' own PodTemplate."""
    assert obj["apiVersion"] == LWS_API_VERSION and obj["kind"] == "LeaderWorkerSet"
    LWS_VALIDATOR.validate(obj)
    tmpl = obj["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        validate_k8s({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"check-{role.lower()}"},
                      "template": tmpl[role]})


def validate(obj: dict) -> None:
    (validate_lws if obj["kind"] == "LeaderWorkerSet" else validate_k8s)(obj)


# --- what a schema cannot know: the manifests agree with the plan ----------------------------------


def serving_pods(objs: dict) -> list[tuple[dict, dict, bool]]:
    """(pod template, the labels its pods carry, whether it runs the server) of the workload."""
    if DEPLOYMENT_NAME in objs:
        tmpl = objs[DEPLOYMENT_NAME]["spec"]["template"]
        return [(tmpl, tmpl["metadata"]["labels"], True)]
    lws = objs[LWS_NAME]
    name, lwt = lws["metadata"]["name"], lws["spec"]["leaderWorkerTemplate"]
    # The controller adds its set name and the worker index (0 = leader) to every pod.
    return [
        (lwt["leaderTemplate"], {**lwt["leaderTemplate"]["metadata"]["labels"], LWS_SET_LABEL: name, LWS_WORKER_INDEX_LABEL: "0"}, True),
        (lwt["workerTemplate"], {**lwt["workerTemplate"]["metadata"]["labels"], LWS_SET_LABEL: name, LWS_WORKER_INDEX_LABEL: "1"}, False),
    ]


def _port(container: dict, port) -> int | None:
    if isinstance(port, int):
        return port
    return next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == port), None)


def _mib(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024**2}
    for unit, scale in units.items():
        if quantity.endswith(unit):
            return float(quantity[: -len(unit)]) * scale
    return float(quantity) / 2**20


def consistency_problems(plan, objs: dict) -> list[str]:
    box, cluster = plan.container, plan.cluster
    gpus = cluster.gpus_per_node if cluster is not None else box.gpus
    problems: list[str] = []
    pods = serving_pods(objs)
    for tmpl, _labels, serves in pods:
        spec = tmpl["spec"]
        [c] = spec["containers"]
        where = f"{tmpl['metadata']['labels'].get('app.kubernetes.io/component')} container"
        probes = {k: c[k] for k in ("startupProbe", "readinessProbe", "livenessProbe") if k in c}
        if serves and set(probes) != {"startupProbe", "readinessProbe", "livenessProbe"}:
            problems.append(f"{where}: probes {sorted(probes)}, not startup, readiness and liveness")
        if not serves and probes:
            problems.append(f"{where}: runs no server but has probes {sorted(probes)}")
        for kind, probe in probes.items():
            for handler in ("httpGet", "tcpSocket", "grpc"):
                if handler in probe and _port(c, probe[handler]["port"]) != box.port:
                    problems.append(f"{where}: {kind} targets port {probe[handler]['port']}, the server listens on {box.port}")
        ready = probes.get("readinessProbe", {})
        if serves and ready.get("exec", {}).get("command") != ["healthcheck", "--ready"]:
            problems.append(f"{where}: readiness is not `healthcheck --ready` (/health and /v1/models, as builder wait)")
        startup = probes.get("startupProbe")
        budget = box.health_start_period_s + (cluster.join_timeout_s if cluster is not None else 0)
        if startup and startup["periodSeconds"] * startup["failureThreshold"] < budget:
            problems.append(f"{where}: the startup probe gives up before the {budget} s a load may take")
        limits = c.get("resources", {}).get("limits", {})
        if limits.get(GPU_RESOURCE) != (gpus or None):
            problems.append(f"{where}: {GPU_RESOURCE} limit {limits.get(GPU_RESOURCE)}, the plan wants {gpus or 'none'}")
        if spec.get("terminationGracePeriodSeconds") != box.stop_timeout_s:
            problems.append(f"{where}: grace period {spec.get('terminationGracePeriodSeconds')} != {box.stop_timeout_s} s")
        env = {e["name"]: e for e in c.get("env", [])}
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        for m in box.mounts:
            mount = mounts.get(m.path)
            if mount is None or mount.get("readOnly", False) != m.read_only:
                problems.append(f"{where}: {m.path} not mounted {'read-only' if m.read_only else 'read-write'}")
            elif "persistentVolumeClaim" not in volumes[mount["name"]]:
                problems.append(f"{where}: {m.path} is not a PersistentVolumeClaim")
            if env.get(m.container_env, {}).get("value") != m.path:
                problems.append(f"{where}: {m.container_env} is not {m.path}")
        shm = volumes.get(mounts.get("/dev/shm", {}).get("name"), {}).get("emptyDir", {})
        if shm.get("medium") != "Memory" or _mib(shm.get("sizeLimit", "0")) < box.min_shm_mib:
            problems.append(f"{where}: /dev/shm is not a memory emptyDir of at least {box.min_shm_mib} MiB")
        caps = c.get("securityContext", {}).get("capabilities", {}).get("add", [])
        if sorted(caps) != sorted(box.cap_add):
            problems.append(f"{where}: capabilities {caps}, the plan adds {box.cap_add}")
        if serves:
            for name in box.passthrough_env:
                ref = env.get(name, {}).get("valueFrom", {}).get("secretKeyRef", {})
                if not ref.get("optional"):
                    problems.append(f"{where}: {name} does not come from an optional Secret")
    service = objs[SERVICE_NAME]["spec"]
    [sp] = service["ports"]
    if sp["port"] != box.port:
        problems.append(f"service: port {sp['port']}, the server's is {box.port}")
    selected = [(t, serves) for t, labels, serves in pods if service["selector"].items() <= labels.items()]
    if [serves for _t, serves in selected] != [True]:
        problems.append(f"service: its selector picks {len(selected)} pod templates, not the one that serves")
    for tmpl, _serves in selected:
        if _port(tmpl["spec"]["containers"][0], sp["targetPort"]) != box.port:
            problems.append(f"service: targetPort {sp['targetPort']} is not the server's port {box.port}")
    return problems


# --- every target ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", TARGETS)
def test_every_manifest_validates_and_agrees_with_the_plan(name):
    cfg, plan, objs = rendered(name)
    cluster = plan.cluster
    assert set(objs) == ({LWS_NAME, SERVICE_NAME} if cluster is not None else {DEPLOYMENT_NAME, SERVICE_NAME})
    assert all(path.startswith(f"{LAUNCH_K8S_DIR}/") for path in objs)
    for obj in objs.values():
        validate(obj)
    assert consistency_problems(plan, objs) == []
    for tmpl, _labels, _serves in serving_pods(objs):
        assert tmpl["spec"]["containers"][0]["image"] == plan.container.image


def test_the_shipped_targets_include_gpu_and_cpu_ones():
    """The loop above covers both branches of the GPU and shm rules."""
    plans = [launch_plan(load_target(name)).container for name in TARGETS]
    assert any(p.gpus for p in plans) and any(not p.gpus for p in plans)
    assert any(len(p.mounts) > 1 for p in plans)  # the PLE table-file claim


def test_files_carry_a_generated_header_and_no_yaml_aliases():
    cfg = load_target("h200")
    for text in k8s_manifests(cfg, launch_plan(cfg)).values():
        assert text.startswith("# h200: ") and "generated; do not edit" in text.splitlines()[0]
        assert "&id" not in text and "*id" not in text


def test_pinned_kubernetes_version_is_one_kubernetes_validate_ships():
    from kubernetes_validate.utils import all_versions

    assert f"{K8S_VERSION}.0" in all_versions()


# --- mutants: each check fails on a broken manifest ---------------------------------------------


def test_misspelled_deployment_field_is_refused():
    _cfg, _plan, objs = rendered("h200")
    validate_k8s(objs[DEPLOYMENT_NAME])
    mutant = copy.deepcopy(objs[DEPLOYMENT_NAME])
    container = mutant["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(K8sValidationError, match="readinesProbe"):
        validate_k8s(mutant)


def test_misspelled_service_field_is_refused():
    _cfg, _plan, objs = rendered("cpu-smoke")
    validate_k8s(objs[SERVICE_NAME])
    mutant = copy.deepcopy(objs[SERVICE_NAME])
    mutant["spec"]["ports"][0]["targetport"] = mutant["spec"]["ports"][0].pop("targetPort")
    with pytest.raises(K8sValidationError, match="targetport"):
        validate_k8s(mutant)


@pytest.mark.parametrize("probe", ["startupProbe", "livenessProbe"])
def test_probe_on_another_port_is_caught(probe):
    _cfg, plan, objs = rendered("h200")
    assert consistency_problems(plan, objs) == []
    mutant = copy.deepcopy(objs)
    mutant[DEPLOYMENT_NAME]["spec"]["template"]["spec"]["containers"][0][probe]["httpGet"]["port"] = plan.container.port + 1
    validate_k8s(mutant[DEPLOYMENT_NAME])  # the schema cannot tell
    assert [p for p in consistency_problems(plan, mutant) if probe in p and "targets port 8001" in p]


def test_service_aimed_at_another_port_is_caught():
    _cfg, plan, objs = rendered("h200")
    mutant = copy.deepcopy(objs)
    mutant[SERVICE_NAME]["spec"]["ports"][0]["targetPort"] = 9000
    validate_k8s(mutant[SERVICE_NAME])
    assert any("targetPort 9000" in p for p in consistency_problems(plan, mutant))


def test_gpu_pod_without_a_gpu_limit_is_caught():
    _cfg, plan, objs = rendered("h200")
    assert plan.container.gpus == 1 and consistency_problems(plan, objs) == []
    mutant = copy.deepcopy(objs)
    del mutant[DEPLOYMENT_NAME]["spec"]["template"]["spec"]["containers"][0]["resources"]
    validate_k8s(mutant[DEPLOYMENT_NAME])  # valid Kubernetes, useless pod
    assert any(GPU_RESOURCE in p and "wants 1" in p for p in consistency_problems(plan, mutant))


def test_cpu_pod_with_a_gpu_limit_is_caught():
    _cfg, plan, objs = rendered("cpu-smoke")
    mutant = copy.deepcopy(objs)
    mutant[DEPLOYMENT_NAME]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: 1}}
    assert any(GPU_RESOURCE in p for p in consistency_problems(plan, mutant))


def test_short_startup_budget_and_plain_http_readiness_are_caught():
    _cfg, plan, objs = rendered("h200")
    mutant = copy.deepcopy(objs)
    c = mutant[DEPLOYMENT_NAME]["spec"]["template"]["spec"]["containers"][0]
    c["startupProbe"]["failureThreshold"] = 3
    c["readinessProbe"] = {"httpGet": {"path": "/health", "port": plan.container.port}}
    problems = consistency_problems(plan, mutant)
    assert any("startup probe gives up" in p for p in problems)
    assert any("readiness is not" in p for p in problems)


# --- multi-node: LeaderWorkerSet ------------------------------------------------------------------


#: Multi-node targets: GPUs linked by a host NIC, and CPU hosts on the pod network's eth0.
GPU_GROUP, CPU_GROUP = "gb10-x2", "cpu-smoke-x2"


def multi_node(name: str = GPU_GROUP, **cluster):
    """A multi-node target's plan, its cluster fields replaced by ``cluster``."""
    cfg = load_target(name)
    plan = launch_plan(cfg)
    if cluster:
        plan = plan.model_copy(update={"cluster": plan.cluster.model_copy(update=cluster)})
    return cfg, plan, {path: yaml.safe_load(text) for path, text in k8s_manifests(cfg, plan).items()}


def test_leader_worker_set_validates_and_agrees_with_the_plan():
    _cfg, plan, objs = multi_node()
    assert set(objs) == {LWS_NAME, SERVICE_NAME}
    validate_lws(objs[LWS_NAME])
    validate_k8s(objs[SERVICE_NAME])
    assert consistency_problems(plan, objs) == []
    cluster = plan.cluster
    lwt = objs[LWS_NAME]["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == cluster.nodes == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    [leader] = lwt["leaderTemplate"]["spec"]["containers"]
    [worker] = lwt["workerTemplate"]["spec"]["containers"]
    assert leader["args"] == ["head"] and worker["args"] == ["worker"]
    assert {"name": cluster.head_address_env, "value": "$(LWS_LEADER_ADDRESS)"} in worker["env"]
    for e in cluster.env:
        assert {"name": e.name, "value": e.value} in worker["env"] and {"name": e.name, "value": e.value} in leader["env"]
    assert {"name": "ray", "containerPort": cluster.ray_port, "protocol": "TCP"} in leader["ports"]
    assert "readinessProbe" in leader and not any(k.endswith("Probe") for k in worker)
    # The link is a host NIC (enp1s0f0np0), which a pod sees only on the host network.
    assert cluster.interface != "eth0"
    assert lwt["workerTemplate"]["spec"]["hostNetwork"] is True
    assert lwt["workerTemplate"]["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


def test_leader_worker_set_on_the_pod_network_and_cpu_hosts():
    _cfg, plan, objs = multi_node(CPU_GROUP)
    assert plan.cluster.interface == "eth0" and plan.cluster.gpus_per_node == 0
    validate_lws(objs[LWS_NAME])
    assert consistency_problems(plan, objs) == []
    lwt = objs[LWS_NAME]["spec"]["leaderWorkerTemplate"]
    assert "hostNetwork" not in lwt["workerTemplate"]["spec"]
    assert "resources" not in lwt["workerTemplate"]["spec"]["containers"][0]


def test_leader_startup_budget_covers_the_join_wait():
    _cfg, plan, objs = multi_node(join_timeout_s=3000)
    assert consistency_problems(plan, objs) == []
    probe = objs[LWS_NAME]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 3000 + plan.container.health_start_period_s


def test_worker_without_its_gpu_is_caught():
    _cfg, plan, objs = multi_node()
    mutant = copy.deepcopy(objs)
    del mutant[LWS_NAME]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"]
    validate_lws(mutant[LWS_NAME])
    assert any("worker container" in p and GPU_RESOURCE in p for p in consistency_problems(plan, mutant))


@pytest.mark.parametrize(
    "where",
    [
        ("spec", "startupPolicy"),
        ("spec", "leaderWorkerTemplate", "restartPolicy"),
        ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec", "containers", 0, "readinessProbe"),
        ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "volumeMounts"),
    ],
    ids=["startupPolicy", "restartPolicy", "leader-readinessProbe", "worker-volumeMounts"],
)
def test_misspelled_leader_worker_set_field_is_refused(where):
    _cfg, _plan, objs = multi_node()
    LWS_VALIDATOR.validate(objs[LWS_NAME])
    mutant = copy.deepcopy(objs[LWS_NAME])
    parent = mutant
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1][:-2] + where[-1][-1]] = parent.pop(where[-1])  # drop the second-last letter
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        LWS_VALIDATOR.validate(mutant)


def test_the_crd_schema_alone_would_let_a_misspelling_through():
    """Why validate_lws closes the schema: the CRD as published lists fields but does not forbid others."""
    _cfg, _plan, objs = multi_node()
    mutant = copy.deepcopy(objs[LWS_NAME])
    mutant["spec"]["startupPolicyy"] = mutant["spec"].pop("startupPolicy")
    jsonschema.Draft7Validator(_lws_schema_raw()).validate(mutant)
    with pytest.raises(jsonschema.ValidationError):
        LWS_VALIDATOR.validate(mutant)


def test_wrong_lws_value_is_refused_by_the_crd():
    _cfg, _plan, objs = multi_node()
    mutant = copy.deepcopy(objs[LWS_NAME])
    mutant["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RecreateGroupOnRestart"
    with pytest.raises(jsonschema.ValidationError, match="is not one of"):
        LWS_VALIDATOR.validate(mutant)


def test_service_selecting_every_pod_of_the_group_is_caught():
    _cfg, plan, objs = multi_node()
    mutant = copy.deepcopy(objs)
    del mutant[SERVICE_NAME]["spec"]["selector"][LWS_WORKER_INDEX_LABEL]
    assert any("selector picks 2" in p for p in consistency_problems(plan, mutant))


def test_fixture_names_its_source_release_and_license():
    head = LWS_SCHEMA.read_text().split("\n", 6)[:6]
    text = "\n".join(head)
    assert f"github.com/kubernetes-sigs/lws/blob/{LWS_RELEASE}/config/crd/bases/" in text
    assert "Apache License 2.0" in text and f"release {LWS_RELEASE}" in text


# --- the readiness probe's script ------------------------------------------------------------------

FAKE_SERVER = textwrap.dedent('''
    import http.server, json, os, sys
    name, key, health = os.environ["FAKE_NAME"], os.environ["FAKE_KEY"], int(os.environ["FAKE_HEALTH"])
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def answer(self, code, body=b""):
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            if self.path == "/health":
                return self.answer(health)
            if key and self.headers.get("Authorization") != "Bearer " + key:
                # As some servers do: the rejected header quoted back.
                return self.answer(401, json.dumps({"error": self.headers.get("Authorization")}).encode())
            self.answer(200, json.dumps({"object": "list", "data": [{"id": name}]}).encode())
    srv = http.server.HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), H)
    open(os.environ["FAKE_READY_FILE"], "w").close()
    srv.serve_forever()
''')

#: In a PID namespace of its own, so the script finds this fake server and no other process's.
RUN_PROBE = textwrap.dedent('''
    set -u
    python3 -c "$FAKE_SERVER_CODE" vllm.entrypoints.openai.api_server --served-model-name "$SERVED" --port "$PORT" &
    i=0; while [ ! -e "$FAKE_READY_FILE" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    exec sh "$HEALTHCHECK" "$@"
''')


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-pf", "--mount-proc", "true"], capture_output=True).returncode == 0


@pytest.fixture
def probe(tmp_path, free_port):
    if not _can_unshare():
        pytest.skip("needs unshare -pf --mount-proc (root on Linux) to give the fake server its own /proc")
    runs = iter(range(1000))

    def run(*args: str, served: str = "m", listed: str = "m", server_key: str = "", client_key: str | None = None,
            health: int = 200) -> subprocess.CompletedProcess:
        env = {
            "PATH": "/usr/bin:/bin", "FAKE_SERVER_CODE": FAKE_SERVER, "FAKE_NAME": listed, "FAKE_KEY": server_key,
            "FAKE_HEALTH": str(health), "FAKE_READY_FILE": str(tmp_path / f"ready-{next(runs)}"), "SERVED": served,
            "PORT": str(free_port), "HEALTHCHECK": str(HEALTHCHECK),
        }
        if client_key is not None:
            env["VLLM_API_KEY"] = client_key
        return subprocess.run(["unshare", "-pf", "--mount-proc", "sh", "-c", RUN_PROBE, "probe", *args],
                              env=env, capture_output=True, text=True, timeout=60)

    return run


def test_liveness_mode_asks_only_health(probe):
    assert probe(listed="other", server_key="k").returncode == 0  # /v1/models would fail: not asked
    assert probe(health=503).returncode == 1


def test_ready_needs_health_and_the_served_model_listed(probe):
    assert probe("--ready").returncode == 0
    proc = probe("--ready", listed="other")
    assert proc.returncode == 1 and "not m" in proc.stderr
    proc = probe("--ready", health=503)
    assert proc.returncode == 1 and "/health" in proc.stderr


def test_ready_sends_the_api_key_and_never_prints_it(probe):
    assert probe("--ready", server_key="s3cret", client_key="s3cret").returncode == 0
    proc = probe("--ready", server_key="s3cret")
    assert proc.returncode == 1 and "answered 401" in proc.stderr and "set VLLM_API_KEY" in proc.stderr
    proc = probe("--ready", server_key="s3cret", client_key="wr0ng-key")
    assert proc.returncode == 1 and "rejected" in proc.stderr
    assert "wr0ng-key" not in proc.stderr + proc.stdout


def test_unknown_argument_is_refused(probe):
    proc = probe("--readiness")
    assert proc.returncode == 2 and "--ready" in proc.stderr

"""The cpu-smoke image used the way users of vLLM's image use it, with real parts: docs/images.md's
commands, its plain `docker run` line with flags after the image name, an API key, a stop with
an open stream, an engine death, and the run-time compiler the engine needs.

Each server here takes 1-7 min to load on 2 busy cores; the cheap checks come first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import threading
import time

import httpx
import pytest
from docker.errors import ContainerError

from builder.config import launch_plan, load_target
from builder.config.overrides import LaunchOverrides
from builder.constants import REPO_ROOT
from builder.errors import ServeError
from builder.models import prepare_smollm2
from builder.launch.compose import docker_run_line
from builder.serve import serve, stop, wait_ready

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

READY_TIMEOUT_S = 20 * 60
DOCS = (REPO_ROOT / "docs" / "images.md").read_text()


@pytest.fixture(scope="module")
def image(cpu_smoke_image):
    return cpu_smoke_image.tag


@pytest.fixture(scope="module")
def model_dir():
    return prepare_smollm2().path


def _readme_block(after: str) -> str:
    """The first ```bash block after the line `after` in docs/images.md."""
    tail = DOCS[DOCS.index(after):]
    return re.search(r"```bash\n(.*?)```", tail, re.S).group(1)


def test_a_command_that_is_an_executable_runs_as_given(image, docker_client):
    assert docker_client.containers.run(image, ["python3", "-c", "print(6 * 7)"], remove=True).strip() == b"42"
    with pytest.raises(ContainerError) as err:
        docker_client.containers.run(image, ["no-such-command"], remove=True, stderr=True)
    assert err.value.exit_status == 127
    assert b"neither a flag for the server" in err.value.stderr


def test_docker_default_shm_is_refused_at_once_saying_what_to_pass(image, docker_client, model_dir):
    start = time.monotonic()
    with pytest.raises(ContainerError) as err:  # docker's default /dev/shm: 64 MiB
        docker_client.containers.run(
            image, environment={"MODEL_DIR": "/models/model"}, volumes={str(model_dir): {"bind": "/models/model", "mode": "ro"}},
            remove=True, stderr=True,
        )
    assert time.monotonic() - start < 60  # before the engine loads, not ~45 s into it
    assert err.value.exit_status == 2
    assert b"/dev/shm holds only" in err.value.stderr and b"--shm-size 1g" in err.value.stderr


def test_torch_compile_works_in_the_image(image, docker_client):
    """What the sampler's logprobs path needs: inductor builds a C++ kernel with g++ (the control
    image without a compiler fails here with InvalidCxxCompiler)."""
    code = "import torch; f = torch.compile(lambda x: (x.sin() + 1).sum()); print(round(float(f(torch.zeros(8))), 3))"
    out = docker_client.containers.run(image, ["python3", "-c", code], remove=True, environment={"TORCHINDUCTOR_CACHE_DIR": "/tmp/ind"})
    assert out.strip().splitlines()[-1] == b"8.0"


def _run_line(*, name: str, port: int, server_port: int, model_dir) -> list[str]:
    """The cpu-smoke `docker run` line of docs/images.md as a shell would split it, with our name and port."""
    block = _readme_block("cpu-smoke:\n")
    assert block.strip() == docker_run_line(launch_plan(load_target("cpu-smoke"))).strip()  # the docs = rendered plan
    words = shlex.split(block.replace("\\\n", " "))
    words = [os.path.expandvars(w) if "$MODEL_DIR" in w else w for w in words]
    words[words.index("--name") + 1] = name
    words[words.index("-p") + 1] = f"127.0.0.1:{port}:{server_port}"
    return words


def test_readme_docker_run_line_with_flags_after_the_image_api_key_and_graceful_stop(image, model_dir, free_port, monkeypatch):
    name = f"qfn-int8kv-cpu-smoke-run-{free_port}"
    key = "e2e-" + os.urandom(8).hex()
    monkeypatch.setenv("MODEL_DIR", str(model_dir))
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    # Flags after the image name are appended to the launch, like vLLM's image: a port and a key.
    cmd = _run_line(name=name, port=free_port, server_port=8123, model_dir=model_dir) + ["--port", "8123", "--api-key", key]
    url = f"http://127.0.0.1:{free_port}"
    subprocess.run(cmd, check=True, capture_output=True)
    try:
        alive = lambda: _check_running(name)  # noqa: E731
        with pytest.raises(ServeError) as err:  # up, then 401 at once: no key sent
            wait_ready(url=url, served_name="smollm2-135m-instruct", timeout_s=READY_TIMEOUT_S, alive=alive, key="")
        assert "requires an API key" in err.value.message
        with pytest.raises(ServeError, match="rejected the key"):
            wait_ready(url=url, served_name="smollm2-135m-instruct", timeout_s=60, key="wrong")
        wait_ready(url=url, served_name="smollm2-135m-instruct", timeout_s=60, key=key)
        # The healthcheck finds the appended --port 8123 on the server's command line.
        assert subprocess.run(["docker", "exec", name, "healthcheck"], capture_output=True).returncode == 0

        events, stop_s = _stop_while_streaming(url=url, key=key, name=name)
        state = json.loads(subprocess.run(["docker", "inspect", name], check=True, capture_output=True).stdout)[0]["State"]
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
        assert state["ExitCode"] == 0, logs[-3000:]
        assert stop_s < 30, f"docker stop took {stop_s:.1f} s"  # inside the stop timeout
        # The server itself exited 0: supervise did not have to kill it after its grace.
        assert "server stopped (status 0) after SIGTERM" in logs, logs[-3000:]
        assert events["chunks_before_stop"] == 5
        # The open stream ended cleanly ([DONE]), not cut off and not left hanging until SIGKILL.
        assert events["done"] and events["error"] is None, events
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def _check_running(name: str) -> None:
    state = json.loads(subprocess.run(["docker", "inspect", name], check=True, capture_output=True).stdout)[0]["State"]
    if not state["Running"]:
        logs = subprocess.run(["docker", "logs", "--tail", "40", name], capture_output=True, text=True)
        raise ServeError(f"{name} stopped: exit {state['ExitCode']}\n{logs.stdout}{logs.stderr}")


def _stop_while_streaming(*, url: str, key: str, name: str) -> tuple[dict, float]:
    """Open a long stream, `docker stop` once tokens flow, and read the stream to its end."""
    body = {"model": "smollm2-135m-instruct", "prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": True,
            "stream": True}
    events = {"chunks_before_stop": 0, "chunks_after_stop": 0, "finish_reason": None, "done": False, "ended": False,
              "error": None}
    stopping = threading.Event()
    result: dict[str, float] = {}

    def do_stop() -> None:
        start = time.monotonic()
        subprocess.run(["docker", "stop", "-t", "30", name], capture_output=True)
        result["stop_s"] = time.monotonic() - start

    stopper = threading.Thread(target=do_stop)
    try:
        with httpx.Client(timeout=httpx.Timeout(60, read=60), trust_env=False) as client, client.stream(
            "POST", f"{url}/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                if line.strip() == "data: [DONE]":
                    events["done"] = True
                    continue
                data = json.loads(line[5:])
                for choice in data.get("choices", []):
                    events["finish_reason"] = choice.get("finish_reason") or events["finish_reason"]
                events["chunks_after_stop" if stopping.is_set() else "chunks_before_stop"] += 1
                if events["chunks_before_stop"] == 5 and not stopping.is_set():
                    stopping.set()
                    stopper.start()
        events["ended"] = True
    except httpx.HTTPError as exc:  # the connection closed under the stream: it ended, without a clean end
        events["ended"], events["error"] = True, f"{type(exc).__name__}: {exc}"
    stopper.join(timeout=120)
    return events, result.get("stop_s", float("inf"))


def test_engine_death_exits_non_zero_and_serve_overrides_reach_the_server(cpu_smoke_target, free_port, docker_client):
    cfg = load_target(cpu_smoke_target)
    name = f"qfn-int8kv-cpu-smoke-death-{free_port}"
    overrides = LaunchOverrides.parse(env=["QFN_E2E_MARK=overrides"], extra_args=["--max-num-seqs", "2"],
                                      cors_origins=["http://localhost:3000"], log_level=None)
    try:
        served = serve(cfg=cfg, host_port=free_port, timeout_s=READY_TIMEOUT_S, name=name, overrides=overrides)
        container = docker_client.containers.get(name)
        probe = ("import os\nfor p in sorted(os.listdir('/proc')):\n if p.isdigit():\n"
                 "  a = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
                 "  if b'vllm.entrypoints.openai.api_server' in a:\n"
                 "   print(b' '.join(a).decode()); print(open(f'/proc/{p}/environ', 'rb').read().count(b'QFN_E2E_MARK=overrides'))")
        out = container.exec_run(["python3", "-c", probe]).output.decode()
        assert out.splitlines()[0].rstrip().endswith('--allowed-origins ["http://localhost:3000"] --max-num-seqs 2'), out
        assert out.splitlines()[1] == "1", out
        r = httpx.options(f"{served.url}/v1/models", headers={"Origin": "http://localhost:3000",
                                                               "Access-Control-Request-Method": "GET"})
        assert r.headers.get("access-control-allow-origin") == "http://localhost:3000"

        kill = ("import os, signal\nfor p in os.listdir('/proc'):\n if p.isdigit() and int(p) != os.getpid() and "
                "b'EngineCore' in open(f'/proc/{p}/cmdline', 'rb').read():\n  os.kill(int(p), signal.SIGKILL); print(p)")
        assert container.exec_run(["python3", "-c", kill]).output.strip(), "no EngineCore process found"
        deadline = time.monotonic() + 120
        while container.status != "exited" and time.monotonic() < deadline:
            time.sleep(1)
            container.reload()
        logs = container.logs().decode(errors="replace")
        assert container.status == "exited", logs[-3000:]
        assert container.attrs["State"]["ExitCode"] == 70, logs[-3000:]
        assert "exited on its own with status 0" in logs
    finally:
        stop(target=cfg.target.name, name=name)


def test_readme_quickstart_serves_and_stops_without_touching_tracked_files(free_port, docker_client, cpu_smoke_image):
    """The serve commands of docs/images.md as written, in the checkout; only the host port and container
    name come from the environment (make reads PORT and NAME), so a parallel run cannot collide."""
    name = f"qfn-int8kv-cpu-smoke-readme-{free_port}"
    env = {**os.environ, "PORT": str(free_port), "NAME": name}
    env.pop("VLLM_API_KEY", None)
    before = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True).stdout
    commands = [c.split("   #")[0] for c in _readme_block("# Image and serve").replace("\\\n", " ").splitlines() if c.strip()]
    assert [c.split()[:2] for c in commands] == [["make", "image"], ["make", "serve"], ["curl", "-s"], ["make", "stop"]]
    try:
        for command in commands:
            command = command.replace("127.0.0.1:8000", f"127.0.0.1:{free_port}")
            proc = subprocess.run(["bash", "-c", command], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
            assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
            if command.startswith("curl"):
                assert json.loads(proc.stdout)["choices"][0]["message"]["content"], proc.stdout
            if command.startswith("make stop"):
                assert f"removed {name}" in proc.stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    assert docker_client.containers.list(all=True, filters={"name": f"^/?{name}$"}) == []
    after = subprocess.run(["git", "status", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True).stdout
    assert after == before  # no tracked (or unignored) file was rewritten

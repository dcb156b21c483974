"""A server whose /tokenize answers 400: the benchmark cannot size its prompts, and says so.

`builder bench` and `builder gates` (needle counts its prompt too) exit 50 with a MeasureError
naming the endpoint, the status and the fix; the client script run alone, as a bundle ships it,
exits 3 with the same message. Neither prints a traceback. Against a real local server
(tests/measure/echo_server.py), each command in its own process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.constants import BENCHMARK_NAME, BENCHMARK_SCRIPT, REPO_ROOT
from tests.measure.echo_server import EchoServer


@pytest.fixture
def refusing():
    server = EchoServer()
    server.tokenize_status = 400
    yield server
    server.stop()


def run(args: list[str], *, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def assert_says_tokenize_refused(proc: subprocess.CompletedProcess, url: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    first = proc.stderr.split("error: ", 1)[-1].splitlines()[0]
    assert first.startswith(f"{url}/tokenize answered HTTP 400 to a token count: "), proc.stderr
    assert "fix: prompts are sized with the server's own /tokenize" in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", [
    ["bench", "--workload", "decode", "--repeats", "1", "--decode-output-len", "8"],
    ["gates", "--only", "needle"],
])
def test_builder_exits_50_naming_the_endpoint_its_status_and_the_fix(refusing, tmp_path, command):
    proc = run(["-m", "builder", *command, "--target", "cpu-smoke", "--url", refusing.url, "--out", str(tmp_path)])
    assert proc.returncode == 50, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: "), proc.stderr
    assert_says_tokenize_refused(proc, refusing.url)


def test_the_client_script_exits_3_with_the_same_message(refusing, tmp_path):
    script = Path(shutil.copy(BENCHMARK_SCRIPT, tmp_path / BENCHMARK_NAME))
    proc = run([str(script), "--url", refusing.url, "--workload", "decode", "--decode-output-len", "8",
                "--out", str(tmp_path / "results")], cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert_says_tokenize_refused(proc, refusing.url)


@pytest.mark.parametrize("command", [["bench", "--workload", "decode", "--repeats", "1"], ["gates", "--only", "golden_probes"]])
def test_a_refused_model_list_is_an_error_naming_the_endpoint(tmp_path, command):
    server = EchoServer()
    server.models_status = 500
    try:
        proc = run(["-m", "builder", *command, "--target", "cpu-smoke", "--url", server.url, "--out", str(tmp_path)])
    finally:
        server.stop()
    assert proc.returncode == 50, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert f"{server.url}/v1/models answered HTTP 500 to the model list" in proc.stderr, proc.stderr

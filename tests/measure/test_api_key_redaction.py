"""The API key never reaches output or a file, against a server that echoes it back.

Each command runs as users run it, in its own process, against tests/measure/echo_server.py (a
real HTTP server on 127.0.0.1 that quotes the Authorization header, and the bare token, in its
error bodies and in /v1/models): `python -m builder wait|gates|bench` and the client script by
its path, copied alone into a folder as a bundle ships it. Neither the key nor any part of it may
show in stdout, stderr or any file the command wrote; `<redacted>` must, so the echo did arrive.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.constants import BENCHMARK_NAME, BENCHMARK_SCRIPT, REPO_ROOT
from tests.measure.echo_server import EchoServer

#: The key's random part: found anywhere, even cut short by a truncated message, it is a leak.
SECRET_PART = secrets.token_hex(8)
KEY = f"sk-qfn-{SECRET_PART}"


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.stop()


def run(args: list[str], *, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "VLLM_API_KEY": KEY}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def leaks(proc: subprocess.CompletedProcess, folder: Path) -> list[str]:
    """Where the key's secret part shows: stdout, stderr, or a file under `folder`."""
    found = [name for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)) if SECRET_PART in text]
    return found + [str(p.relative_to(folder)) for p in sorted(folder.rglob("*"))
                    if p.is_file() and SECRET_PART.encode() in p.read_bytes()]


def redacted_somewhere(proc: subprocess.CompletedProcess, folder: Path) -> bool:
    texts = [proc.stdout, proc.stderr] + [p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()]
    return any("<redacted>" in t for t in texts)


def test_wait_prints_the_listed_models_with_the_key_redacted(echo, tmp_path):
    proc = run(["-m", "builder", "wait", "--url", echo.url, "--served-name", "absent-model", "--timeout", "3"])
    assert proc.returncode == 40, proc.stderr
    assert leaks(proc, tmp_path) == []
    assert "gateway saw Bearer <redacted>" in proc.stderr, proc.stderr


@pytest.mark.parametrize(("gate", "code"), [("api_surface", 51), ("golden_probes", 50)])
def test_gates_print_and_write_error_bodies_with_the_key_redacted(echo, tmp_path, gate, code):
    """api_surface records each 400 body in its evidence; golden_probes fails on the first one and
    quotes it in the error message."""
    proc = run(["-m", "builder", "gates", "--target", "cpu-smoke", "--url", echo.url, "--out", str(tmp_path),
                "--only", gate])
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert leaks(proc, tmp_path) == []
    assert redacted_somewhere(proc, tmp_path)
    if gate == "api_surface":
        evidence = json.loads((tmp_path / "api_surface.json").read_text())
        details = evidence["observed"]["details"]
        assert "Bearer <redacted>" in details["missing_messages"], details


def test_bench_writes_failed_requests_with_the_key_redacted(echo, tmp_path):
    proc = run(["-m", "builder", "bench", "--target", "cpu-smoke", "--url", echo.url, "--out", str(tmp_path),
                "--workload", "decode", "--repeats", "1", "--decode-output-len", "8"])
    assert proc.returncode == 50, proc.stdout + proc.stderr  # every request was refused
    assert leaks(proc, tmp_path) == []
    errors = json.loads((tmp_path / "bench-decode.json").read_text())["errors"]
    assert errors and all("<redacted>" in e for e in errors), errors


@pytest.fixture
def bundled_client(tmp_path) -> Path:
    """The client alone in a folder, as a bundle ships it: it runs without the builder."""
    folder = tmp_path / "bundle"
    folder.mkdir()
    return Path(shutil.copy(BENCHMARK_SCRIPT, folder / BENCHMARK_NAME))


def test_the_client_script_writes_failed_requests_with_the_key_redacted(echo, tmp_path, bundled_client):
    out = tmp_path / "results"
    proc = run([str(bundled_client), "--url", echo.url, "--workload", "decode", "--decode-output-len", "8",
                "--out", str(out)], cwd=bundled_client.parent)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # requests failed, and that is all
    assert leaks(proc, tmp_path) == []
    errors = json.loads((out / "bench-decode.json").read_text())["errors"]
    assert errors and all("<redacted>" in e for e in errors), errors


def test_the_client_script_ab_names_the_failed_arm_with_the_key_redacted(echo, tmp_path, bundled_client):
    proc = run([str(bundled_client), "--url", echo.url, "--ab-url", echo.url, "--rounds", "1", "--ab-input-len", "32",
                "--ab-output-len", "4", "--background", "0", "--out", str(tmp_path / "ab")], cwd=bundled_client.parent)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "arm A: request failed: HTTP 400" in proc.stderr
    assert leaks(proc, tmp_path) == []
    assert "Bearer <redacted>" in proc.stderr


def test_a_serve_error_quoting_the_container_log_comes_out_redacted(echo, monkeypatch):
    """serve's alive check quotes the container's last log lines, which may echo the key."""
    from builder.errors import ServeError
    from builder.serve.wait import wait_ready

    monkeypatch.setenv("VLLM_API_KEY", KEY)

    def alive() -> None:
        raise ServeError(f"container exited\n--- log ---\nrequest from {KEY} with Authorization: Bearer {KEY}", hint="x")

    with pytest.raises(ServeError) as exc:
        wait_ready(url=echo.url, served_name=echo.url, timeout_s=5, alive=alive)
    assert SECRET_PART not in str(exc.value) and SECRET_PART not in exc.value.message
    assert "request from <redacted> with Authorization: Bearer <redacted>" in exc.value.message


# --- the rule itself ---


def test_the_rule_finds_the_key_however_text_spells_it(monkeypatch):
    from builder.redact import REDACTED, redact, redact_data

    key = 'k"ey\\é-' + SECRET_PART
    monkeypatch.setenv("VLLM_API_KEY", key)
    spelled = [key, json.dumps(key), json.dumps(key, ensure_ascii=False), repr(key)]
    for text in spelled:
        assert SECRET_PART not in redact(f"answer: {text} end"), text
    # A bearer credential is found whatever it is; the JSON escape after it stays whole.
    assert redact('{"detail": "{\\"auth\\": \\"Bearer other-token\\"}"}') == '{"detail": "{\\"auth\\": \\"Bearer <redacted>\\"}"}'
    assert redact_data({"Bearer x": [f"a {key}", 3, None]}) == {f"Bearer {REDACTED}": [f"a {REDACTED}", 3, None]}
    assert redact("no key here: 42 tokens") == "no key here: 42 tokens"


def test_a_credential_after_an_authorization_header_is_found_in_any_case_and_prose_is_left_alone(monkeypatch):
    from builder.redact import redact

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert redact("authorization: bearer other-token") == "authorization: bearer <redacted>"
    assert redact('{"AUTHORIZATION": "BEARER other-token"}') == '{"AUTHORIZATION": "BEARER <redacted>"}'
    # Generated text lands in evidence files: a lowercase "bearer" in prose is not a credential.
    assert redact("the bearer of this letter") == "the bearer of this letter"


def test_the_rule_reads_the_variable_the_builder_reads():
    from builder.constants import ENV_VLLM_API_KEY
    from builder.measure import client

    assert client.API_KEY_ENV == ENV_VLLM_API_KEY


def test_evidence_files_are_written_with_the_key_redacted(tmp_path, monkeypatch):
    from builder.measure.evidence import write_json_atomic, write_text_atomic

    monkeypatch.setenv("VLLM_API_KEY", KEY)
    write_json_atomic(tmp_path / "a.json", {"records": [{"response": {"error": f"bad key {KEY}"}}], "n": 1.5})
    write_text_atomic(tmp_path / "a.md", f"| {KEY} |\n")
    assert json.loads((tmp_path / "a.json").read_text()) == {"records": [{"response": {"error": "bad key <redacted>"}}], "n": 1.5}
    assert (tmp_path / "a.md").read_text() == "| <redacted> |\n"


def test_wait_used_as_a_library_prints_and_raises_with_the_key_redacted(echo, monkeypatch):
    """serve calls wait_ready with its own console, outside the CLI's redacted output."""
    import io

    from rich.console import Console

    from builder.errors import ServeError
    from builder.serve.wait import wait_ready

    monkeypatch.setenv("VLLM_API_KEY", KEY)
    printed = io.StringIO()
    with pytest.raises(ServeError) as exc:
        wait_ready(url=echo.url, served_name="absent-model", timeout_s=1, poll_s=0.2, console=Console(file=printed, width=60))
    assert SECRET_PART not in printed.getvalue() and SECRET_PART not in str(exc.value)
    assert "gateway saw Bearer <redacted>" in exc.value.message


def test_the_cli_redacts_whatever_a_command_prints_and_a_bug_s_traceback(run_cli, monkeypatch):
    """The catch-all: text no source redacted, and the traceback of an unexpected error."""
    import builder.serve

    monkeypatch.setenv("VLLM_API_KEY", KEY)

    def wait_ready(**_: object) -> None:
        print(f"a library printing its request: Authorization: Bearer {KEY}")
        raise ValueError(f"unexpected answer quoting {KEY}")

    monkeypatch.setattr(builder.serve, "wait_ready", wait_ready, raising=False)
    code, out, err = run_cli("wait", "--url", "http://127.0.0.1:9", "--served-name", "m")
    assert code == 1
    assert "Traceback" in err and "ValueError: unexpected answer quoting <redacted>" in err, err
    assert "Authorization: Bearer <redacted>" in out
    assert SECRET_PART not in out + err

"""docker/supervise, PID 1 of the served image, with real processes: the exit status a restart
policy sees, stop signals forwarded, and a server that ignores them killed after the grace."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from builder.constants import REPO_ROOT

SUPERVISE = REPO_ROOT / "docker" / "supervise"


def _start(script: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(SUPERVISE), sys.executable, "-c", script],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env},
    )


def test_a_server_that_ends_on_its_own_with_0_is_a_failure():
    """vLLM's API server exits 0 after its engine died: a restart policy must see a failure."""
    proc = _start("print('engine dead, shutting down')")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 70
    assert "exited on its own with status 0" in err and "engine dead" in out


def test_other_exit_statuses_pass_through():
    proc = _start("import sys; sys.exit(3)")
    proc.communicate(timeout=30)
    assert proc.returncode == 3


def test_sigterm_reaches_the_server_and_a_requested_stop_exits_0():
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: (print('draining', flush=True), sys.exit(0)))\n"
              "print('ready', flush=True); time.sleep(60)")
    proc = _start(script)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "draining" in out
    assert "SIGTERM: stopping the server" in err


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace_and_the_stop_still_exits_0():
    script = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "print('ready', flush=True); time.sleep(60)")
    proc = _start(script, QFN_STOP_GRACE_S="1")
    assert proc.stdout.readline().strip() == "ready"
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert 0.9 < time.monotonic() - start < 10
    assert "did not stop within 1 s; killing it" in err


def test_a_missing_command_says_so():
    proc = subprocess.run([sys.executable, str(SUPERVISE), "/no/such/server"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 127 and "cannot start /no/such/server" in proc.stderr

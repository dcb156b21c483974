"""serve's signal handling without docker: SIGINT/SIGTERM become `Interrupted` in the main
thread, a held step finishes before the signal is raised, and an inherited SIG_IGN stays."""

from __future__ import annotations

import os
import signal

import pytest

from builder.serve.lifecycle import Interrupted, _Interrupts


def _raise(signum: int) -> None:
    os.kill(os.getpid(), signum)


@pytest.fixture
def sigint_default():
    """SIGINT as a terminal gives it. A runner started with `&` by a non-interactive shell inherits
    it ignored, and _Interrupts rightly leaves an ignored SIGINT alone: without this the tests below
    failed in such a run (a fresh-clone `.ci/run` started in the background)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("sigint_default")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_is_raised_as_interrupted(signum):
    with _Interrupts(), pytest.raises(Interrupted) as err:
        _raise(signum)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
    assert err.value.signum == signum
    assert isinstance(err.value, KeyboardInterrupt)


@pytest.mark.usefixtures("sigint_default")
def test_held_step_finishes_then_the_signal_is_raised():
    finished = []
    with _Interrupts() as interrupts, pytest.raises(Interrupted) as err:
        with interrupts.held():
            _raise(signal.SIGTERM)
            for _ in range(1000):
                pass
            finished.append(True)  # a create call that must not be cut in half
    assert finished == [True]
    assert err.value.signum == signal.SIGTERM


def test_handlers_are_restored_and_an_ignored_sigint_stays_ignored():
    before_term = signal.getsignal(signal.SIGTERM)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _Interrupts():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not before_term
        assert signal.getsignal(signal.SIGTERM) is before_term
    finally:
        signal.signal(signal.SIGINT, previous)


def test_these_tests_hold_when_the_runner_inherited_sigint_ignored():
    """The control for the fixture: this module run by a pytest that starts with SIGINT ignored."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "not inherited"],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN), capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stdout[-2000:]

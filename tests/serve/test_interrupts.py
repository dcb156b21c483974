"""serve's signal handling without docker: SIGINT/SIGTERM become `Interrupted` in the main
thread, a held step finishes before the signal is raised, and an inherited SIG_IGN stays."""

from __future__ import annotations

import os
import signal

import pytest

from builder.serve.lifecycle import Interrupted, _Interrupts


def _raise(signum: int) -> None:
    os.kill(os.getpid(), signum)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_is_raised_as_interrupted(signum):
    with _Interrupts(), pytest.raises(Interrupted) as err:
        _raise(signum)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
    assert err.value.signum == signum
    assert isinstance(err.value, KeyboardInterrupt)


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

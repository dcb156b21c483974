"""The background set-ups: each job runs once however many fixtures wait on it, a job's error is
raised where its result is asked for, with the job's log in that test's output, and only the jobs
the selected tests need are started."""

from __future__ import annotations

import threading

import pytest

from tests import prefetch as pf


def test_a_job_runs_once_for_every_waiter_and_its_log_reaches_the_test_output(tmp_path, monkeypatch, capsys):
    runs = []
    gate = threading.Event()

    def job(jobs, out):
        gate.wait(10)
        runs.append(threading.current_thread().name)
        print("built it", file=out)
        return "the result"

    monkeypatch.setitem(pf.JOBS, "thing", job)
    jobs = pf.Prefetch(tmp_path)
    first = jobs.start("thing")
    assert jobs.start("thing") is first and not first.done()  # started, not waited on
    gate.set()
    assert [jobs.result("thing"), jobs.wait("thing")] == ["the result", "the result"]
    assert runs == ["prefetch-thing"]
    assert "built it" in capsys.readouterr().out


def test_a_failed_job_raises_its_error_in_the_fixture_that_asks(tmp_path, monkeypatch, capsys):
    def job(jobs, out):
        print("what went wrong first", file=out)
        raise RuntimeError("the build failed")

    monkeypatch.setitem(pf.JOBS, "thing", job)
    jobs = pf.Prefetch(tmp_path)
    with pytest.raises(RuntimeError, match="the build failed"):
        jobs.result("thing")
    assert "what went wrong first" in capsys.readouterr().out


def test_only_the_jobs_of_the_selected_tests_fixtures_start(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(pf.Prefetch, "start", lambda self, name: started.append(name))
    jobs = pf.Prefetch(tmp_path)
    assert jobs.start_for([{"tmp_path", "engine_src"}, {"free_port"}]) == ["engine"]
    assert jobs.start_for([{"tmp_path"}]) == []
    assert jobs.start_for([{"cpu_smoke_url", "cpu_smoke_image", "cpu_smoke_target", "base_image"}, {"linted"}]) == [
        "base_image", "cpu_smoke_image", "cpu_smoke_target", "lint_venv"]
    assert started == ["engine", "base_image", "cpu_smoke_image", "cpu_smoke_target", "lint_venv"]

"""`builder gates` and `builder bench` refuse a bad option before a request is sent or a folder made."""

from __future__ import annotations

import pytest

from builder.errors import MeasureError


@pytest.fixture
def out(tmp_path):
    return tmp_path / "evidence"  # must still not exist after a refused run


def _refused(run_cli, listener, out, *args, named: str) -> None:
    code, stdout, err = run_cli(*args)
    text = " ".join(err.split())
    assert code == MeasureError.exit_code, stdout + err
    assert named in text and "fix:" in text
    assert listener.seen() == 0
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--url", "{url}/v1?x=1"], "--url"),
        (["--url", "127.0.0.1:8000"], "--url '127.0.0.1:8000' has no scheme"),
        (["--url", "{url}", "--only", "golden_probes", "--only", "nosuch"], "--only nosuch"),
        (["--url", "{url}", "--server-log", "{out}/missing.log"], "--server-log"),
    ],
)
def test_bad_gates_options(args, named, run_cli, listener, out):
    args = [a.format(url=listener.url, out=out) for a in args]
    _refused(run_cli, listener, out, "gates", "--target", "cpu-smoke", "--out", str(out), *args, named=named)


def test_gates_out_that_is_a_file_is_refused_before_any_request(run_cli, listener, tmp_path):
    (tmp_path / "file").write_text("x")
    code, stdout, err = run_cli("gates", "--target", "cpu-smoke", "--url", listener.url, "--out", str(tmp_path / "file"))
    assert code == MeasureError.exit_code and "--out" in err and "not a folder" in err, stdout + err
    assert listener.seen() == 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--workload", "nosuch"], "--workload nosuch"),
        (["--concurrency", "0,2"], "--concurrency"),
        (["--concurrency", "two"], "--concurrency 'two'"),
        (["--decode-output-len", "0"], "--decode-output-len 0"),
        (["--ab-url", "{url}", "--ab-labels", "x/..,y"], "--ab-labels 'x/..,y'"),
        (["--ab-url", "{url}", "--ab-labels", "same,same"], "--ab-labels"),
        (["--ab-url", "{url}", "--ab-labels", "a,b,c"], "--ab-labels"),
        (["--ab-url", "{url}", "--ab-output-len", "1"], "--ab-output-len 1"),
        (["--ab-url", "{url}/x#frag"], "--ab-url"),
    ],
)
def test_bad_bench_options(args, named, run_cli, listener, out):
    args = [a.format(url=listener.url) for a in args]
    _refused(run_cli, listener, out, "bench", "--target", "cpu-smoke", "--url", listener.url, "--out", str(out), *args,
             named=named)


def test_bench_out_under_a_file_is_refused_before_any_request(run_cli, listener, tmp_path):
    (tmp_path / "file").write_text("x")
    code, stdout, err = run_cli("bench", "--target", "cpu-smoke", "--url", listener.url, "--out", str(tmp_path / "file" / "ev"))
    assert code == MeasureError.exit_code and "--out" in err, stdout + err
    assert listener.seen() == 0


def test_good_bench_options_reach_the_server(run_cli, listener, out):
    """Control: the same run with valid options does contact the endpoint (then fails: it is no server)."""
    code, stdout, err = run_cli("bench", "--target", "cpu-smoke", "--url", listener.url, "--out", str(out),
                                "--workload", "decode", "--concurrency", "1,2")
    assert code == MeasureError.exit_code and "no server answers" in " ".join(err.split()), stdout + err
    assert listener.seen() >= 1

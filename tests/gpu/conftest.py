"""The GPU suites: collected everywhere, skipped without a GPU. The GPU host runs them with torch and
triton but no install of the builder, from a repo copy (benchmarks/kernels/evidence.sh)."""


def pytest_configure(config):
    # pytest-xdist registers it where installed; the GPU host's --dist loadgroup keeps a window's tests on one worker.
    config.addinivalue_line("markers", "xdist_group(name): tests that share one pytest-xdist worker and its compiled kernels")

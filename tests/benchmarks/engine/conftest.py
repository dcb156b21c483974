"""The engine harness lives in benchmarks/engine (not the builder package): put the repo root on
sys.path so `benchmarks.engine` imports however pytest is started."""

from __future__ import annotations

import sys

from builder.constants import REPO_ROOT

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def engine_src():
    """The verified vllm==0.33.0 sources (downloads ~336 MB once, then cached)."""
    from builder.patches.engine import fetch_engine

    return fetch_engine().src_dir

"""Publish fixtures: real bundle directories on disk, and a recording fake of HfApi.

The fake is the only stand-in: the Hub cannot be reached from here. Its errors are built by
huggingface_hub's own hf_raise_for_status from real HTTP responses, so the publish code sees
exactly the exception types the real client raises.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from huggingface_hub import CommitOperationAdd, CommitOperationDelete
from huggingface_hub.hf_api import CommitInfo, GitRefInfo, GitRefs
from huggingface_hub.utils import hf_raise_for_status

from builder import constants
from builder.bundle.sign import sign_bundle
from builder.checksums import tree_digest
from builder.keys import generate_key_pair

FAKE_TOKEN = "hf_QFNfakeTOKENneverPRINTED0123456789abcd"

CARD = """---
library_name: vllm
base_model: Qwen/Qwen3.8-Flash-Next-INT8x25-AttnBF16
license: apache-2.0
tags:
- int8
- kv-cache
---

# Qwen3.8-Flash-Next, INT8 KV build

Quick start: `bash launch/run_qsa_int8kv.sh`.
"""


def gate_file(gate: str, *, verdict: str = "pass", required: bool = True) -> dict[str, Any]:
    return {
        "gate": gate,
        "required": required,
        "verdict": verdict,
        "summary": "3/3" if verdict == "pass" else "1/3",
        "created": "2026-11-29T10:00:00Z",
    }


def write_checksums(root: Path) -> None:
    """CHECKSUMS.sha256 as `sha256sum` writes it: '<hex>  <relpath>', sorted, LF (model.sig left out, as the builder does)."""
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(root).as_posix()}"
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != constants.CHECKSUMS_NAME and p.relative_to(root).as_posix() != constants.SIGNATURE_NAME
    ]
    (root / constants.CHECKSUMS_NAME).write_text("\n".join(sorted(lines, key=lambda l: l[66:])) + "\n")


@functools.lru_cache(maxsize=1)
def _key_pair() -> tuple[Path, Path]:
    folder = Path(tempfile.mkdtemp(prefix="qfn-test-keys-"))
    atexit.register(shutil.rmtree, folder, True)
    generate_key_pair(private_path=folder / "release.key", public_path=folder / "release.key.pub")
    return folder / "release.key", folder / "release.key.pub"


def signing_key() -> Path:
    """The private key make_bundle signs with (made once per test run, mode 0600)."""
    return _key_pair()[0]


def public_key() -> Path:
    """The public key of `signing_key()`: what publish checks model.sig against."""
    return _key_pair()[1]


def make_bundle(root: Path, *, gates: dict[str, dict[str, Any]] | None = None, card: str = CARD, signed: bool = True) -> Path:
    """A bundle with every release gate passing unless `gates` overrides them (None value = absent),
    signed with `signing_key()` unless `signed` is False."""
    files = {
        "README.md": card,
        "launch/run_qsa_int8kv.sh": "#!/usr/bin/env bash\nset -euo pipefail\necho serve\n",
        "launch/ENV.md": "# Environment\n",
        "patches/series": "qsa-int8.diff\n",
        "patches/qsa-int8.diff": "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        "benchmark_vllm.py": "print('bench')\n",
        "evidence/bench-decode.json": json.dumps({"workload": "decode", "output_throughput": 13.4}),
        constants.BUNDLE_MANIFEST_NAME: json.dumps(
            {
                "schema_version": 1,
                "target": "gb10",
                "bundle_version": "0.3.1",
                "engine_profile": "upstream-0.33.0",
                "engine_version": "0.33.0",
                "kv_cache_dtype": "int8_per_token_head",
                "config_digest": "sha256:" + "d" * 64,
                "patch_series_sha256": "e" * 64,
                "created": "2026-11-29T10:00:00Z",
            }
        ),
    }
    all_gates = {name: gate_file(name) for name in constants.PUBLISH_REQUIRED_GATES}
    all_gates.update(gates or {})
    for name, data in all_gates.items():
        if data is not None:
            files[f"evidence/{name}.json"] = json.dumps(data)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # bundle.json's series digest must be that of patches/, as verify checks it.
    manifest = root / constants.BUNDLE_MANIFEST_NAME
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "patch_series_sha256": tree_digest(root / "patches")}))
    write_checksums(root)
    if signed:
        sign_bundle(root, key=signing_key())
    return root


def http_error(status: int, *, method: str = "POST", url: str = "https://huggingface.co/api/repos/create", message: str | None = None) -> Exception:
    """The exception huggingface_hub raises for this status, made by its own response handling."""
    request = httpx2.Request(method, url, headers={"authorization": f"Bearer {FAKE_TOKEN}"})
    headers = {"X-Error-Message": message} if message else {}
    response = httpx2.Response(status, request=request, headers=headers)
    try:
        hf_raise_for_status(response)
    except Exception as exc:  # noqa: BLE001 - the point is to capture whatever type it raises
        return exc
    raise AssertionError(f"hf_raise_for_status did not raise for {status}")


def head_of(branch: str) -> str:
    """A distinct fake commit id per branch, so tests can tell which head a commit was based on."""
    return hashlib.sha1(branch.encode()).hexdigest()


@dataclass
class Sent:
    """One create_commit operation as it reached the Hub client: kind, path and exact bytes."""

    kind: str
    path: str
    data: bytes | None


@dataclass
class FakeHfApi:
    """Records every call with its arguments; `fail[method]` lists exceptions raised on the next calls."""

    token: str | None = None
    tags: list[str] = field(default_factory=list)
    branches: list[str] = field(default_factory=lambda: ["main"])
    remote_files: list[str] = field(default_factory=lambda: [".gitattributes"])
    fail: dict[str, list[Exception]] = field(default_factory=dict)
    calls: list[tuple[str, tuple, dict]] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)

    def _record(self, name: str, args: tuple, kwargs: dict) -> None:
        self.calls.append((name, args, kwargs))
        pending = self.fail.get(name)
        if pending:
            raise pending.pop(0)

    @property
    def methods(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def create_repo(self, *args: Any, **kwargs: Any) -> str:
        self._record("create_repo", args, kwargs)
        return f"https://huggingface.co/{args[0]}"

    def list_repo_refs(self, *args: Any, **kwargs: Any) -> GitRefs:
        self._record("list_repo_refs", args, kwargs)
        return GitRefs(
            branches=[GitRefInfo(name=b, ref=f"refs/heads/{b}", target_commit=head_of(b)) for b in self.branches],
            converts=[],
            tags=[GitRefInfo(name=t, ref=f"refs/tags/{t}", target_commit="0" * 40) for t in self.tags],
        )

    def create_branch(self, *args: Any, **kwargs: Any) -> None:
        self._record("create_branch", args, kwargs)

    def list_repo_files(self, *args: Any, **kwargs: Any) -> list[str]:
        self._record("list_repo_files", args, kwargs)
        return list(self.remote_files)

    def create_commit(self, repo_id: str, operations: list, **kwargs: Any) -> CommitInfo:
        self._record("create_commit", (repo_id, operations), kwargs)
        # Read the bytes now, as the real client would upload them now; a staged copy is gone later.
        self.sent = []
        for op in operations:
            if isinstance(op, CommitOperationAdd):
                with op.as_file() as fh:
                    self.sent.append(Sent("add", op.path_in_repo, fh.read()))
            elif isinstance(op, CommitOperationDelete):
                self.sent.append(Sent("delete", op.path_in_repo, None))
            else:
                raise AssertionError(f"unexpected operation {op!r}")
        return CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/{'c' * 40}",
            commit_message=kwargs["commit_message"],
            commit_description=kwargs.get("commit_description") or "",
            oid="c" * 40,
        )

    def create_tag(self, *args: Any, **kwargs: Any) -> None:
        self._record("create_tag", args, kwargs)


class FakeFactory:
    """Stands in for the HfApi class: remembers the token it was given and hands out one fake."""

    def __init__(self, api: FakeHfApi) -> None:
        self.api = api
        self.tokens: list[str | None] = []

    def __call__(self, *, token: str | None = None) -> FakeHfApi:
        self.tokens.append(token)
        self.api.token = token
        return self.api


@pytest.fixture
def hub(monkeypatch) -> FakeFactory:
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    return FakeFactory(FakeHfApi())


@pytest.fixture
def bundle(tmp_path) -> Path:
    return make_bundle(tmp_path / "gb10")


@pytest.fixture(autouse=True)
def no_real_login(monkeypatch, tmp_path):
    """No test may find the developer's own Hub token: the env var is cleared and the login cache
    points at an empty temp path."""
    import huggingface_hub.constants as hf_constants

    monkeypatch.delenv(constants.ENV_HF_TOKEN, raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))

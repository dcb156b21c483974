"""The engine locks in docker/locks/: well formed, one hashed wheel per package for their platform,
pinned by the targets that use them; an edited lock or a malformed line is refused."""

from __future__ import annotations

import shutil

import pytest
from packaging.utils import parse_wheel_filename

from builder.config import load_target, require_pinned_base
from builder.constants import LOCKS_DIR, REPO_ROOT
from builder.errors import LockError
from builder.image.base import base_tag, load_pinned_lock
from builder.image.lock import read_lock

LOCKS = sorted(LOCKS_DIR.glob("vllm-0.33.0-linux-*.txt"))
ARCH_TAGS = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}


def test_both_platforms_are_locked():
    assert [p.name for p in LOCKS] == ["vllm-0.33.0-linux-amd64.txt", "vllm-0.33.0-linux-arm64.txt"]


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.name)
def test_lock_pins_the_engine_its_torch_and_one_wheel_per_package(path):
    lock = read_lock(path)
    assert lock.engine == "vllm==0.33.0"
    assert lock.platform in path.name.replace("-", "/")  # linux/amd64 in ...-linux-amd64.txt
    assert lock.python.startswith("3.11")
    assert lock.entry("vllm").version == "0.33.0"
    assert lock.entry("torch").version == "2.14.0"  # vllm 0.33.0 pins it exactly
    names = [e.name.lower() for e in lock.entries]
    assert len(names) == len(set(names))
    for e in lock.entries:
        name, version, _, tags = parse_wheel_filename(e.filename)
        assert str(version) == e.version or e.version in e.filename
        platforms = {t.platform for t in tags}
        assert platforms == {"any"} or any(ARCH_TAGS[lock.platform] in p for p in platforms), e.filename


@pytest.mark.parametrize("name", ["gb10", "cmp170hx-x2", "h200"])
def test_gpu_targets_pin_the_lock_of_their_platform(name):
    cfg = load_target(name)
    assert cfg.target.base_source == "wheel-lock"
    pinned = require_pinned_base(cfg)
    lock = load_pinned_lock(path=REPO_ROOT / cfg.target.base_lock_path, digest=pinned.split("@", 1)[1])
    assert lock.platform == cfg.target.platform
    assert base_tag(lock).startswith(f"qfn-int8kv-base:vllm-0.33.0-{cfg.target.arch}-")


def test_an_edited_lock_is_refused(tmp_path):
    src = LOCKS[0]
    copy = tmp_path / src.name
    shutil.copy(src, copy)
    digest = read_lock(copy).digest
    copy.write_text(copy.read_text().replace("vllm==0.33.0", "vllm==0.33.1", 1))
    with pytest.raises(LockError) as err:
        load_pinned_lock(path=copy, digest=digest)
    assert digest in err.value.message and "builder pin" in err.value.hint


def test_a_line_without_a_hash_is_refused(tmp_path):
    copy = tmp_path / "lock.txt"
    copy.write_text(LOCKS[0].read_text() + "requests==2.34.2\n")
    with pytest.raises(LockError) as err:
        read_lock(copy)
    assert "requests==2.34.2" in err.value.message

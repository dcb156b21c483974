"""target.addon_locks: each entry a pinned lock of the target's platform in docker/locks/, and only
over an engine lock (base_source = wheel-lock); every refusal names target.addon_locks[i] and its fix."""

from __future__ import annotations

import pytest

from builder.config import parse_config
from builder.errors import ConfigError

DIGEST = "@sha256:" + "ab" * 32
RAY = "docker/locks/ray-2.60.0-linux-arm64.txt"


def _load(target_data, addons: list[str], **target):
    data = target_data("gb10")  # linux/arm64, base_source = wheel-lock
    data["target"]["addon_locks"] = addons
    data["target"].update(target)
    return parse_config(data, source="gb10 with add-ons")


def test_a_pinned_addon_lock_of_the_platform_loads(target_data):
    assert _load(target_data, [RAY + DIGEST]).target.addon_locks == [RAY + DIGEST]
    assert _load(target_data, []).target.addon_locks == []


@pytest.mark.parametrize(
    ("entries", "index", "problem", "fix"),
    [
        ([RAY], 0, "has no @sha256: digest", "builder pin --target gb10"),
        ([RAY + "@sha256:abc"], 0, "malformed digest", "builder pin --target gb10"),
        ([RAY + "@md5:" + "ab" * 16], 0, "malformed digest", "builder pin"),
        (["docker/locks/ray-2.60.0-linux-amd64.txt" + DIGEST], 0, "not a lock of linux/arm64", "ray-2.60.0-linux-arm64.txt"),
        (["docker/locks/ray-2.60.0.txt" + DIGEST], 0, "not a lock of linux/arm64", "-linux-arm64.txt"),
        (["locks/ray-2.60.0-linux-arm64.txt" + DIGEST], 0, "is not a lock in docker/locks/", "--addon"),
        (["docker/locks/extra/ray-2.60.0-linux-arm64.txt" + DIGEST], 0, "is not a lock in docker/locks/", "--addon"),
        (["/work/docker/locks/ray-2.60.0-linux-arm64.txt" + DIGEST], 0, "outside the repository", "relative"),
        (["docker/locks/../../ray-2.60.0-linux-arm64.txt" + DIGEST], 0, "outside the repository", "relative"),
        ([RAY + DIGEST, RAY + DIGEST], 1, "named twice", "once"),
        ([RAY + DIGEST, "docker/locks/vllm-0.33.0-linux-arm64.txt" + DIGEST], 1, "the engine lock itself", "--addon"),
    ],
)
def test_a_bad_addon_entry_is_refused(target_data, entries, index, problem, fix):
    with pytest.raises(ConfigError) as err:
        _load(target_data, entries)
    message = err.value.message
    assert f"target.addon_locks[{index}]" in message and problem in message
    assert fix in message.split("Fix:", 1)[1]


def test_addon_locks_need_a_lock_base(target_data):
    with pytest.raises(ConfigError) as err:
        _load(target_data, [RAY + DIGEST], base_source="image", base_image="vllm/vllm-openai@sha256:" + "cd" * 32)
    message = err.value.message
    assert "target.addon_locks[0]" in message and "base_source = 'image'" in message
    assert 'base_source = "wheel-lock"' in message

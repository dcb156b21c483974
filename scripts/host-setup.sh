#!/usr/bin/env bash
# Installs the host tools the tests use (Debian packages) when missing, and starts dockerd.
# Safe to rerun; it changes nothing when everything is already there.
set -euo pipefail

need=()
command -v shellcheck >/dev/null || need+=(shellcheck)
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
# `docker compose config` validates the bundles' compose.yaml (Debian ships compose as docker-compose).
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || need+=(docker-compose)
if ((${#need[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "host-setup: missing ${need[*]}; install them (apt-get install -y ${need[*]}) or run as root" >&2
    exit 1
  fi
  echo "host-setup: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "host-setup: the docker daemon is not running; start it (sudo dockerd &)" >&2
    exit 1
  fi
  echo "host-setup: starting dockerd"
  (setsid dockerd >/tmp/dockerd.log 2>&1 &)
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "host-setup: dockerd did not start; see /tmp/dockerd.log" >&2; tail -n 20 /tmp/dockerd.log >&2; exit 1; }
fi

#!/usr/bin/env bash
# Starts a Docker registry on 127.0.0.1:5000 (Debian's docker-registry package; no Docker Hub),
# so locally built base images get a registry digest to pin. Safe to rerun.
set -euo pipefail

addr="127.0.0.1:5000"
if curl -fsS "http://$addr/v2/" >/dev/null 2>&1; then
  exit 0
fi
if ! command -v docker-registry >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "local-registry: install docker-registry (apt-get install -y docker-registry)" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry curl >/dev/null
fi
data="${QFN_REGISTRY_DIR:-${QFN_CACHE_DIR:-$HOME/.cache/qfn-int8kv}/registry}"
mkdir -p "$data"
conf="$data/config.yml"
cat >"$conf" <<YAML
version: 0.1
storage:
  filesystem:
    rootdirectory: $data/storage
http:
  addr: $addr
YAML
echo "local-registry: starting on $addr (data in $data)"
(setsid docker-registry serve "$conf" >/tmp/qfn-registry.log 2>&1 &)
for _ in $(seq 30); do curl -fsS "http://$addr/v2/" >/dev/null 2>&1 && exit 0; sleep 1; done
echo "local-registry: did not start; see /tmp/qfn-registry.log" >&2
tail -n 20 /tmp/qfn-registry.log >&2
exit 1

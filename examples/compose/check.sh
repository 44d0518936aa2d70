#!/bin/sh
# CI check of the docker-compose demo (no container engine needed): the
# compose file must parse and validate with Debian's docker-compose, and the
# gateway config and hooks.json it mounts must pass their own checks when a
# gateway binary is at hand ($HOOKGATE_BIN, default: `go run ./cmd/gateway`).
#
#   examples/compose/check.sh          # from anywhere; works on the repo root
set -eu
cd "$(dirname "$0")/../.."

if ! command -v docker-compose >/dev/null 2>&1; then
  echo "check.sh: docker-compose is missing (apt-get install -y docker-compose)" >&2
  exit 1
fi
docker-compose -f docker-compose.yml config -q
echo "docker-compose.yml: OK ($(docker-compose version --short 2>/dev/null || echo '?'))"

if [ -n "${HOOKGATE_BIN:-}" ]; then
  set -- "$HOOKGATE_BIN"
elif command -v go >/dev/null 2>&1; then
  set -- go run ./cmd/gateway
else
  echo "check.sh: no gateway binary (HOOKGATE_BIN) and no go; skipping the config checks" >&2
  exit 0
fi
# check opens every file the config names, as serve does; in the demo the
# CA and the receiver's certificate are made when the containers start, so a
# copy of the config gets stand-ins next to it: a fresh CA, and its
# certificate as the receiver's. check reads TELEMETRY_TOKEN (the
# transform); any value will do here.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp examples/compose/gateway.yaml "$tmp/gateway.yaml"
"$@" ca init --dir "$tmp/ca" >/dev/null
mkdir "$tmp/receiver-tls"
cp "$tmp/ca/ca.pem" "$tmp/receiver-tls/cert.pem"
TELEMETRY_TOKEN=check "$@" check --config "$tmp/gateway.yaml" >/dev/null
echo "examples/compose/gateway.yaml: OK"
"$@" hooks check --root examples/compose --workspace /nonexistent >/dev/null
echo "examples/compose/.agents/hooks.json: OK"
sh -n examples/agent/agent.sh
sh -n examples/compose/gateway-entrypoint.sh
echo "scripts: OK"

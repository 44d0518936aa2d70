#!/bin/sh
# Entrypoint of the gateway image (installed as /usr/local/bin/hookgate-entrypoint).
#
# For `gateway serve`, before starting it:
#   1. creates the gateway's CA on first start (`gateway ca init`) in
#      $HOOKGATE_CA_DIR — a volume only the gateway mounts: the key
#      (ca-key.pem) never reaches the sandbox;
#   2. publishes what the sandbox needs in $HOOKGATE_TRUST_DIR — a volume the
#      sandbox mounts read-only: ca.pem, and bundle.pem = the system roots
#      plus ca.pem, for SSL_CERT_FILE, CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, ...;
#   3. waits (up to $HOOKGATE_WAIT_SECONDS) for the files named in
#      $HOOKGATE_WAIT_FOR (space-separated), e.g. the receiver's certificate,
#      which the config reads as upstream.ca_file.
# Then, and for any other command, it execs the command.
#
# Every path is an environment variable with the container default, so the
# script also runs outside containers (the end-to-end test does).
set -eu

CA_DIR=${HOOKGATE_CA_DIR:-/var/lib/hookgate/ca}
TRUST_DIR=${HOOKGATE_TRUST_DIR:-/var/lib/hookgate/trust}
SYSTEM_ROOTS=${HOOKGATE_SYSTEM_ROOTS:-/etc/ssl/certs/ca-certificates.crt}
WAIT_FOR=${HOOKGATE_WAIT_FOR:-}
WAIT_SECONDS=${HOOKGATE_WAIT_SECONDS:-60}
GATEWAY=${HOOKGATE_BIN:-gateway}

log() { printf 'hookgate-entrypoint: %s\n' "$*" >&2; }

# Only `gateway serve` (or `serve` alone) needs the CA.
case "${1:-}:${2:-}" in
  gateway:serve|*/gateway:serve|serve:*) ;;
  *) exec "$@" ;;
esac
[ "${1:-}" = serve ] && set -- "$GATEWAY" "$@"

# 1. The CA, once. Half a CA (a crash between the two files) is an error to
#    look at, not something to paper over by making a new one.
if [ -s "$CA_DIR/ca.pem" ] && [ -s "$CA_DIR/ca-key.pem" ]; then
  log "using the existing CA in $CA_DIR"
elif [ -e "$CA_DIR/ca.pem" ] || [ -e "$CA_DIR/ca-key.pem" ]; then
  log "$CA_DIR holds only part of a CA (ca.pem / ca-key.pem); remove both to make a new one"
  exit 1
else
  log "creating the gateway CA in $CA_DIR"
  "$GATEWAY" ca init --dir "$CA_DIR" >/dev/null
fi

# 2. The sandbox's trust files, replaced atomically (write, then rename) so a
#    reader never sees half a bundle.
mkdir -p "$TRUST_DIR"
umask 022
cp "$CA_DIR/ca.pem" "$TRUST_DIR/.ca.pem.tmp"
mv -f "$TRUST_DIR/.ca.pem.tmp" "$TRUST_DIR/ca.pem"
if [ -r "$SYSTEM_ROOTS" ]; then
  cat "$SYSTEM_ROOTS" "$CA_DIR/ca.pem" >"$TRUST_DIR/.bundle.pem.tmp"
else
  log "no system roots at $SYSTEM_ROOTS; bundle.pem holds the gateway CA only"
  cat "$CA_DIR/ca.pem" >"$TRUST_DIR/.bundle.pem.tmp"
fi
mv -f "$TRUST_DIR/.bundle.pem.tmp" "$TRUST_DIR/bundle.pem"
log "published $TRUST_DIR/ca.pem and $TRUST_DIR/bundle.pem"

# 3. Files the config needs at start.
for f in $WAIT_FOR; do
  i=0
  while [ ! -s "$f" ]; do
    if [ "$i" -ge "$WAIT_SECONDS" ]; then
      log "gave up after ${WAIT_SECONDS}s waiting for $f"
      exit 1
    fi
    [ "$i" -eq 0 ] && log "waiting for $f"
    i=$((i + 1))
    sleep 1
  done
done

exec "$@"

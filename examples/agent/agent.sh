#!/bin/sh
# The example agent of the docker-compose demo (docs/deploy.md). It stands in
# for an agent runtime: around each tool call it runs the sandbox's hooks
# with `gateway hooks run`, exactly as a runtime would —
#
#   pre_tool_execution  before the call; exit 2 (deny) means the call is
#                       not made and the reason is what the model would see;
#   post_tool_execution after it, with "error" when the tool failed.
#
# The tool calls: code_execution `ls -la <workspace>` (allowed),
# code_execution `rm -rf <canary>` (denied by the receiver's security gate,
# and the canary survives), write_file and read_file of a note (allowed,
# audited). It needs no proxy settings (transparent mode) and no token: the
# gateway injects it. It exits 0 when every call went as expected, 3 when
# one did not (the gate let rm -rf through, an allowed call was denied...),
# 1 when `gateway hooks run` itself failed.
#
# Every path is an environment variable with the container default, so the
# script runs outside containers too (the end-to-end test runs it under
# `gateway sandbox exec`):
#   HOOKGATE_BIN         gateway binary                     (gateway)
#   AGENT_WORKSPACE      workspace: tools run there, hooks use --workspace  (/workspace)
#   HOOKS_ROOT           --root: where /.agents/hooks.json is looked for  (/)
#   ENVIRONMENT_ID       environment_id of the events       (env_compose_demo)
#   AGENT_CANARY         directory the denied rm -rf aims at (/tmp/x)
#   HOOKS_CA_FILE        optional --ca-file for the HTTP hooks (the gateway CA);
#                        by default the hooks trust SSL_CERT_FILE's bundle
#   AGENT_READY_URL      polled until it answers 2xx before the first call
#                        (https://telemetry.example.com/healthz; "" skips it)
#   AGENT_READY_SECONDS  how long to wait for SSL_CERT_FILE and AGENT_READY_URL (60)
set -eu

GATEWAY=${HOOKGATE_BIN:-gateway}
WS=${AGENT_WORKSPACE:-/workspace}
ROOT=${HOOKS_ROOT:-/}
ENV_ID=${ENVIRONMENT_ID:-env_compose_demo}
CANARY=${AGENT_CANARY:-/tmp/x}
CA_FILE=${HOOKS_CA_FILE:-}
READY_URL=${AGENT_READY_URL-https://telemetry.example.com/healthz}
READY_SECONDS=${AGENT_READY_SECONDS:-60}

say() { printf '[agent] %s\n' "$*"; }

# jobj K V [K V ...]: a JSON object of strings.
jobj() {
  python3 -c 'import json, sys; a = sys.argv[1:]; print(json.dumps(dict(zip(a[::2], a[1::2]))))' "$@"
}

# event NAME ARGS_JSON [ERROR]: the hook event (docs/hooks.md, "The event").
event() {
  python3 -c '
import json, sys
ev = {"tool_call": {"name": sys.argv[1], "args": json.loads(sys.argv[2])}, "environment_id": sys.argv[3]}
if len(sys.argv) > 4:
    ev["error"] = sys.argv[4]
print(json.dumps(ev))' "$@"
}

# field JSON KEY: a top-level string field of a JSON object ("" if absent).
field() {
  printf '%s' "$1" | python3 -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$2" 2>/dev/null || true
}

# hooks EVENT_NAME EVENT_JSON: run the hooks; the decision JSON on stdout,
# exit status 0 allow, 2 deny, 1 broken invocation.
hooks() {
  hook_event=$1 hook_input=$2
  shift 2
  set -- --root "$ROOT" --workspace "$WS" --environment-id "$ENV_ID"
  if [ -n "$CA_FILE" ]; then set -- "$@" --ca-file "$CA_FILE"; fi
  printf '%s' "$hook_input" | "$GATEWAY" hooks run "$hook_event" "$@"
}

# call NAME ARGS_JSON COMMAND...: one tool call with its hooks. Sets RESULT
# to allowed or denied.
call() {
  name=$1 args=$2
  shift 2
  ev=$(event "$name" "$args" "$ENV_ID")
  rc=0
  decision=$(hooks pre_tool_execution "$ev") || rc=$?
  case $rc in
    0) ;;
    2)
      say "DENIED  $name $args"
      say "        reason: $(field "$decision" reason)"
      RESULT=denied
      return 0
      ;;
    *)
      say "gateway hooks run pre_tool_execution failed (exit $rc); stopping"
      exit 1
      ;;
  esac
  say "ALLOWED $name $args"
  st=0
  out=$("$@" 2>&1) || st=$?
  if [ -n "$out" ]; then printf '%s\n' "$out" | sed 's/^/        | /'; fi
  if [ "$st" -eq 0 ]; then
    ev=$(event "$name" "$args" "$ENV_ID")
  else
    ev=$(event "$name" "$args" "$ENV_ID" "exit status $st: $out")
  fi
  rc=0
  hooks post_tool_execution "$ev" >/dev/null || rc=$?
  if [ "$rc" -eq 1 ]; then
    say "gateway hooks run post_tool_execution failed (exit $rc); stopping"
    exit 1
  fi
  RESULT=allowed
}

# The tools themselves.
code_execution() { (cd "$WS" && sh -c "$1"); }
write_file() { printf '%s\n' "$2" >"$1"; }
read_file() { cat "$1"; }

# Wait until the trust bundle exists and the receiver answers through the
# gateway (a TLS error here means the gateway is not in the path yet).
wait_ready() {
  i=0
  if [ -n "${SSL_CERT_FILE:-}" ]; then
    while [ ! -s "$SSL_CERT_FILE" ]; do
      [ "$i" -ge "$READY_SECONDS" ] && { say "no trust bundle at $SSL_CERT_FILE after ${READY_SECONDS}s"; exit 1; }
      i=$((i + 1))
      sleep 1
    done
  fi
  [ -n "$READY_URL" ] || return 0
  until curl -fsS -o /dev/null --max-time 5 "$READY_URL" 2>/dev/null; do
    [ "$i" -ge "$READY_SECONDS" ] && {
      say "$READY_URL not reachable after ${READY_SECONDS}s:"
      curl -sS -o /dev/null --max-time 5 "$READY_URL" || true
      exit 1
    }
    i=$((i + 1))
    sleep 1
  done
  say "receiver reachable through the gateway: $READY_URL"
}

wait_ready
mkdir -p "$WS" "$CANARY"
: >"$CANARY/keep"
failures=0
expect() { # WANT GOT WHAT
  if [ "$1" != "$2" ]; then
    say "UNEXPECTED: $3 was $2, expected $1"
    failures=$((failures + 1))
  fi
}

code="ls -la $WS"
call code_execution "$(jobj code "$code" language bash)" code_execution "$code"
expect allowed "$RESULT" "ls"

code="rm -rf $CANARY"
call code_execution "$(jobj code "$code" language bash)" code_execution "$code"
expect denied "$RESULT" "rm -rf"
if [ -e "$CANARY/keep" ]; then
  say "$CANARY is still there"
else
  say "UNEXPECTED: $CANARY is gone"
  failures=$((failures + 1))
fi

note="$WS/notes.txt"
content="written by the example agent in $ENV_ID"
call write_file "$(jobj path "$note" content "$content")" write_file "$note" "$content"
expect allowed "$RESULT" "write_file"

call read_file "$(jobj path "$note")" read_file "$note"
expect allowed "$RESULT" "read_file"

if [ "$failures" -gt 0 ]; then
  say "$failures unexpected result(s)"
  exit 3
fi
say "done: ls allowed, rm -rf denied by the security gate, write_file and read_file audited"

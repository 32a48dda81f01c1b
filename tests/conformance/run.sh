#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, from npm) against a live
# server's /mcp. It needs Node >= 22: the npm package node@22 is installed beside it in a local
# prefix, so the system Node is never touched. Called by .ci/run; by hand:
#   bash tests/conformance/run.sh            (PYTHON=... to pick the interpreter, PREFIX=... the npm prefix)
set -euo pipefail
cd "$(dirname "$0")/../.."

SUITE_VERSION=0.1.16
PREFIX=${PREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/bhgbrain-conformance-$SUITE_VERSION}
PYTHON=${PYTHON:-.venv/bin/python}

# The server scenarios that apply to this product. Left out, because they call the suite's own
# test tools, prompts or resources that only its reference server has: tools-call-* (test_simple_text,
# test_image_content, ...), prompts-get-* (test_simple_prompt, ...), json-schema-2020-12
# (json_schema_2020_12_tool), elicitation-* (test_elicitation*), server-sse-polling
# (test_reconnection: a tool that closes its own stream mid-call). Resumability is tested by
# tests/mcp_bridge/test_mcp_notifications.py instead.
SCENARIOS=(
  server-initialize ping logging-set-level completion-complete tools-list resources-list
  resources-templates-read resources-subscribe resources-unsubscribe prompts-list
  server-sse-multiple-streams dns-rebinding-protection
)

if [ ! -x "$PREFIX/node_modules/.bin/conformance" ] || [ ! -x "$PREFIX/node_modules/.bin/node" ]; then
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error \
    node@22 "@modelcontextprotocol/conformance@$SUITE_VERSION" >&2
fi
export PATH="$PREFIX/node_modules/.bin:$PATH"  # node@22's `node` first: the suite runs on it

home=$(mktemp -d)
port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo '{}' > "$home/config.json"
"$PYTHON" -m bhgbrain_site.cli.main --config="$home/config.json" server start --port="$port" --no-scheduler \
  > "$home/server.out" 2> "$home/server.err" &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$home"; }
trap cleanup EXIT
for _ in $(seq 1 120); do
  curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$home/server.err" >&2; exit 1; }
  sleep 0.5
done

passed=0 failed=0 failures=()
for scenario in "${SCENARIOS[@]}"; do
  if conformance server --url "http://127.0.0.1:$port/mcp" --scenario "$scenario" > "$home/$scenario.log" 2>&1; then
    passed=$((passed + 1)); echo "conformance: $scenario passed"
  else
    failed=$((failed + 1)); failures+=("$scenario"); echo "conformance: $scenario FAILED"; cat "$home/$scenario.log"
  fi
done
echo "conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ] || { echo "failed: ${failures[*]}" >&2; exit 1; }

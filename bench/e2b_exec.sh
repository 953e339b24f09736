#!/usr/bin/env bash
# The exec round trip through E2B's JavaScript SDK (npm package e2b, unmodified) against
# Airlock's E2B-compatible API, next to Airlock's own: the p50 and p90 of N
# `sandbox.commands.run('true')` calls against N `exec` of `true` through the Go SDK
# (bench/goexec), both on one sandbox of one private daemon, in the same run. The two
# take turns in rounds of N/4, each after 10 untimed calls, so a change of load on the
# machine touches both. Target: E2B p50 ≤ 1.5× Go p50.
#
# The E2B side is what the SDK sends for run('true'): a Connect server stream over HTTP
# on the e2b_listen port that starts `/bin/bash -l -c true` (a login shell, which reads
# /etc/profile) and relays its events; the Go side sends {"shell": "true"} over the unix
# socket (/bin/sh -c true), and, as a third series, the SDK's own command
# /bin/bash -l -c true, whose ratio is the cost of the E2B plane alone.
#
# It builds airlock, starts a private daemon (own state directory, socket, cgroup parent
# and e2b_listen port on loopback; no sandbox networking), installs e2b into the test
# suite's npm cache if it is not there, stops the daemon by its pid and removes its
# state. Needs root, runc, node and npm. Usage:
#   bash bench/e2b_exec.sh [N]        # N defaults to 200
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

N=${1:-200}
E2B_VERSION=2.51.0 # as internal/integration's e2bSDKVersion
NPM_CACHE=${XDG_CACHE_HOME:-/var/cache}/airlock-test/npm
TMP=$(mktemp -d /tmp/al-e2bexec.XXXXXX)
chmod 711 "$TMP" # the sandboxes (other uids) pass through to their state
PID=""
SB=""

if [ "$(id -u)" != 0 ]; then
	echo "bench/e2b_exec.sh: needs root for its private daemon" >&2
	exit 2
fi
for tool in node npm; do
	command -v "$tool" >/dev/null || { echo "bench/e2b_exec.sh: needs $tool" >&2; exit 2; }
done

BENCH=e2bexec
. bench/lib/daemon.sh

stop() {
	local rc=$?
	if [ -n "$SB" ] && [ -S "$SOCK" ]; then
		"$TMP/airlock" --socket "$SOCK" rm "$SB" >/dev/null 2>&1 || true
	fi
	daemon_stop
	exit "$rc"
}
trap stop EXIT

# E2B's SDK, in the npm cache the test suite uses (internal/integration's npmPackage).
SDK="$NPM_CACHE/e2b@$E2B_VERSION"
if [ ! -f "$SDK/node_modules/e2b/package.json" ]; then
	echo "bench/e2b_exec.sh: installing e2b@$E2B_VERSION into $SDK" >&2
	mkdir -p "$NPM_CACHE"
	INSTALL=$(mktemp -d "$NPM_CACHE/.install-XXXXXX")
	npm install --prefix "$INSTALL" --no-audit --no-fund --loglevel=error "e2b@$E2B_VERSION" >&2
	mv -T "$INSTALL" "$SDK" 2>/dev/null || rm -rf "$INSTALL" # another process may have won
fi
ln -s "$SDK/node_modules" "$TMP/node_modules"

echo "bench/e2b_exec.sh: building airlock and the Go side" >&2
go build -o "$TMP/goexec" ./bench/goexec

PORT=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })')
WAIT_PORT=$PORT daemon_start "e2b_listen: 127.0.0.1:$PORT"

airlock() { "$TMP/airlock" --socket "$SOCK" "$@"; }
airlock user create bench --role developer >/dev/null
export E2B_API_URL="http://127.0.0.1:$PORT" E2B_SANDBOX_URL="http://127.0.0.1:$PORT"
E2B_API_KEY=$(airlock token create --user bench --format e2b 2>/dev/null)
export E2B_API_KEY
unset E2B_DOMAIN E2B_ACCESS_TOKEN E2B_DEBUG

# The E2B side: `create` prints a new sandbox's id; `time ID N WARMUP` connects to it and
# prints each timed round trip in microseconds, one per line.
cat >"$TMP/e2bexec.mjs" <<-'EOF'
	import { Sandbox } from 'e2b'
	const [mode, id, n, warmup] = process.argv.slice(2)
	if (mode === 'create') {
	  console.log((await Sandbox.create('base', { timeoutMs: 30 * 60_000 })).sandboxId)
	} else {
	  const sandbox = await Sandbox.connect(id, { timeoutMs: 30 * 60_000 })
	  for (let i = -Number(warmup); i < Number(n); i++) {
	    const t0 = process.hrtime.bigint()
	    const res = await sandbox.commands.run('true')
	    const d = process.hrtime.bigint() - t0
	    if (res.exitCode !== 0) throw new Error(`run('true'): exit ${res.exitCode}`)
	    if (i >= 0) console.log(String(d / 1000n))
	  }
	}
	process.exit(0)
EOF

SB=$(node "$TMP/e2bexec.mjs" create)
ROUND=$((N / 4))
: >"$TMP/go.txt"
: >"$TMP/gologin.txt"
: >"$TMP/e2b.txt"
for _ in 1 2 3 4; do
	"$TMP/goexec" -socket "$SOCK" -sandbox "$SB" -n "$ROUND" -warmup 10 >>"$TMP/go.txt"
	"$TMP/goexec" -socket "$SOCK" -sandbox "$SB" -n "$ROUND" -warmup 10 -login >>"$TMP/gologin.txt"
	node "$TMP/e2bexec.mjs" time "$SB" "$ROUND" 10 >>"$TMP/e2b.txt"
done

node - "$TMP/go.txt" "$TMP/e2b.txt" "e2b@$E2B_VERSION, node $(node --version)" "$(go version | cut -d' ' -f3)" "$TMP/gologin.txt" <<-'EOF'
	const fs = require('fs')
	const [goFile, e2bFile, e2bName, goName, loginFile] = process.argv.slice(2)
	const load = (p) => fs.readFileSync(p, 'utf8').split('\n').filter(Boolean).map(Number).sort((a, b) => a - b)
	const q = (v, f) => v[Math.min(v.length - 1, Math.floor(f * v.length))] / 1000
	const median = (v) => (v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2) / 1000
	const go = load(goFile), e2b = load(e2bFile), login = load(loginFile)
	for (const [name, v] of [[`Go SDK (${goName})`, go], [`Go SDK, bash -l -c true`, login], [`E2B SDK (${e2bName})`, e2b]]) {
	  console.log(`${name.padEnd(40)} n=${v.length}  p50 ${median(v).toFixed(2)} ms  p90 ${q(v, 0.9).toFixed(2)} ms  max ${(v.at(-1) / 1000).toFixed(2)} ms`)
	}
	const ratio = median(e2b) / median(go)
	console.log(`E2B / Go p50: ${ratio.toFixed(2)}x (target <= 1.5x: ${ratio <= 1.5 ? 'met' : 'MISSED'})`)
	// The SDK runs every command as /bin/bash -l -c CMD: the same command through the Go SDK.
	console.log(`E2B / Go running the same bash -l -c true, p50: ${(median(e2b) / median(login)).toFixed(2)}x`)
EOF

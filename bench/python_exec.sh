#!/usr/bin/env bash
# Reproduces the "Python SDK exec round trip" section of bench/RESULTS.md: the p50 of
# N `exec("true")` round trips through the Python SDK (sdk/python) against the p50
# through the Go SDK (bench/goexec), both on one sandbox of one private daemon, in the
# same run. The two take turns in rounds of N/4, so a change of load on the machine
# touches both. Target: Python p50 ≤ 1.5× Go p50.
#
# By default it builds airlock and starts a private daemon (own state directory, socket
# and cgroup parent; no sandbox networking), stops it by its pid and removes its state.
# With AIRLOCK_SOCKET set it uses that running daemon instead. Needs root and runc for
# the private daemon. Usage:
#   bash bench/python_exec.sh [N]        # N defaults to 200
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

N=${1:-200}
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d /tmp/al-pyexec.XXXXXX)
chmod 711 "$TMP" # the sandboxes (other uids) pass through to their state
GOEXEC="$TMP/goexec"
PID=""
SB="pyexec-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"

BENCH=pyexec
. bench/lib/daemon.sh

stop() {
	local rc=$?
	if [ -n "${SOCK:-}" ] && [ -S "$SOCK" ]; then
		AIRLOCK_SOCKET="$SOCK" PYTHONPATH=sdk/python "$PY" -c \
			'import sys, airlock; airlock.Client().terminate(sys.argv[1])' "$SB" 2>/dev/null || true
	fi
	daemon_stop
	exit "$rc"
}
trap stop EXIT

echo "bench/python_exec.sh: building the Go side" >&2
go build -o "$GOEXEC" ./bench/goexec

if [ -n "${AIRLOCK_SOCKET:-}" ]; then
	SOCK=$AIRLOCK_SOCKET
else
	if [ "$(id -u)" != 0 ]; then
		echo "bench/python_exec.sh: needs root for its private daemon (or set AIRLOCK_SOCKET to a running one)" >&2
		exit 2
	fi
	daemon_start
fi
export AIRLOCK_SOCKET=$SOCK PYTHONPATH=sdk/python

"$PY" -c 'import sys, airlock; airlock.Sandbox.create(sys.argv[1], network="none")' "$SB"

ROUND=$((N / 4))
: >"$TMP/go.txt"
: >"$TMP/py.txt"
for _ in 1 2 3 4; do
	"$GOEXEC" -sandbox "$SB" -n "$ROUND" -warmup 10 >>"$TMP/go.txt"
	"$PY" - "$SB" "$ROUND" 10 >>"$TMP/py.txt" <<-'EOF'
		import sys, time
		import airlock
		sb = airlock.Sandbox.get(sys.argv[1])
		n, warmup = int(sys.argv[2]), int(sys.argv[3])
		for i in range(-warmup, n):
		    t0 = time.perf_counter()
		    res = sb.exec("true")
		    d = time.perf_counter() - t0
		    if not res.ok:
		        sys.exit(f"exec true: {res}")
		    if i >= 0:
		        print(round(d * 1e6))
	EOF
done

"$PY" - "$TMP/go.txt" "$TMP/py.txt" "$("$PY" --version 2>&1)" "$(go version | cut -d' ' -f3)" <<-'EOF'
	import statistics, sys
	def load(p):
	    return sorted(int(l) for l in open(p) if l.strip())
	go, py = load(sys.argv[1]), load(sys.argv[2])
	def q(v, f):
	    return v[min(len(v) - 1, int(f * len(v)))] / 1000
	for name, v in (("Go SDK (" + sys.argv[4] + ")", go), ("Python SDK (" + sys.argv[3] + ")", py)):
	    print(f"{name:32} n={len(v)}  p50 {statistics.median(v) / 1000:.2f} ms  p90 {q(v, 0.9):.2f} ms  max {v[-1] / 1000:.2f} ms")
	ratio = statistics.median(py) / statistics.median(go)
	print(f"Python / Go p50: {ratio:.2f}x (target <= 1.5x: {'met' if ratio <= 1.5 else 'MISSED'})")
EOF

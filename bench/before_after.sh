#!/usr/bin/env bash
# Two airlock binaries side by side, for a change that must not slow anything down: warm
# exec through the native API (the Go SDK's Exec of `true` over the unix socket,
# bench/goexec) and through the E2B-compatible API (E2B's npm SDK, commands.run('true')),
# each binary with its own private daemon and one sandbox, in ROUNDS rounds that alternate
# which binary goes first; then CLI start-up (`airlock help`, no daemon, 100 runs each,
# alternating) and binary size. Prints p50/p90 per series and the per-round p50s' median.
#
# Needs root, runc, node and E2B's SDK in the test suite's npm cache (bench/e2b_exec.sh
# installs it). Stops both daemons by pid and removes their state. Usage:
#   bash bench/before_after.sh BEFORE_BIN AFTER_BIN [ROUNDS [N]]   # 20 rounds of 20 calls
# A binary's airlockd (the daemon, where the CLI is airlock alone) is taken from beside it.
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
. bench/lib/timing.sh

BINS=("$1" "$2")
NAMES=(before after)
ROUNDS=${3:-20}
N=${4:-20}
SDK=${XDG_CACHE_HOME:-/var/cache}/airlock-test/npm/e2b@2.51.0
TOP=$(mktemp -d /tmp/al-beforeafter.XXXXXX)
chmod 711 "$TOP"
PIDS=()
SBS=()

stop() {
	local rc=$? i d
	for i in 0 1; do
		d=$TOP/${NAMES[$i]}
		if [ -n "${SBS[$i]:-}" ] && [ -S "$d/api.sock" ]; then
			"$d/airlock" --socket "$d/api.sock" rm "${SBS[$i]}" >/dev/null 2>&1 || true
		fi
		if [ -n "${PIDS[$i]:-}" ] && kill -0 "${PIDS[$i]}" 2>/dev/null; then
			kill -TERM "${PIDS[$i]}"
			wait "${PIDS[$i]}" || true
		fi
		rmdir /sys/fs/cgroup/*/"airlock-ba-${NAMES[$i]}" /sys/fs/cgroup/"airlock-ba-${NAMES[$i]}" 2>/dev/null || true
		rm -f "/run/airlock.names/cgroup-airlock-ba-${NAMES[$i]}.lock"
	done
	# what the daemons leave mounted (their secrets tmpfs), deepest first
	awk -v p="$TOP/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" || true; done
	if grep -q " $TOP/" /proc/self/mountinfo; then
		echo "bench/before_after.sh: mounts left under $TOP; not removing it" >&2
	else
		rm -rf "$TOP"
	fi
	exit "$rc"
}
trap stop EXIT

go build -o "$TOP/goexec" ./bench/goexec
ln -s "$SDK/node_modules" "$TOP/node_modules"
cat >"$TOP/e2bexec.mjs" <<-'JS'
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
JS

port() { node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close() })'; }
PORTS=()
for i in 0 1; do
	d=$TOP/${NAMES[$i]}
	mkdir -p "$d"
	cp "${BINS[$i]}" "$d/airlock"
	if [ -e "$(dirname "${BINS[$i]}")/airlockd" ]; then cp "$(dirname "${BINS[$i]}")/airlockd" "$d/airlockd"; fi
	PORTS[$i]=$(port)
	cat >"$d/airlock.yaml" <<-YAML
		state_dir: $d/state
		secrets_dir: $d/secrets
		socket: $d/api.sock
		cgroup_parent: airlock-ba-${NAMES[$i]}
		log_level: warn
		network: {enabled: false}
		e2b_listen: 127.0.0.1:${PORTS[$i]}
	YAML
	"$d/airlock" serve --config "$d/airlock.yaml" >"$d/daemon.log" 2>&1 &
	PIDS[$i]=$!
	for _ in $(seq 300); do
		[ -S "$d/api.sock" ] && (exec 3<>"/dev/tcp/127.0.0.1/${PORTS[$i]}") 2>/dev/null && break
		kill -0 "${PIDS[$i]}" || { cat "$d/daemon.log" >&2; exit 2; }
		sleep 0.1
	done
	"$d/airlock" --socket "$d/api.sock" user create bench --role developer >/dev/null
	KEYS[$i]=$("$d/airlock" --socket "$d/api.sock" token create --user bench --format e2b 2>/dev/null)
	SBS[$i]=$(cd "$TOP" && E2B_API_URL=http://127.0.0.1:${PORTS[$i]} E2B_SANDBOX_URL=http://127.0.0.1:${PORTS[$i]} \
		E2B_API_KEY=${KEYS[$i]} node e2bexec.mjs create)
done
unset E2B_DOMAIN E2B_ACCESS_TOKEN E2B_DEBUG

side() { # side I: one round of both series against binary I
	local i=$1 d=$TOP/${NAMES[$1]}
	"$TOP/goexec" -socket "$d/api.sock" -sandbox "${SBS[$i]}" -n "$N" -warmup 3 >"$TOP/cur"
	cat "$TOP/cur" >>"$TOP/native-${NAMES[$i]}.txt"
	echo "$(sort -n "$TOP/cur" | sed -n "$((N / 2 + 1))p")" >>"$TOP/native-${NAMES[$i]}.rounds"
	(cd "$TOP" && E2B_API_URL=http://127.0.0.1:${PORTS[$i]} E2B_SANDBOX_URL=http://127.0.0.1:${PORTS[$i]} \
		E2B_API_KEY=${KEYS[$i]} node e2bexec.mjs time "${SBS[$i]}" "$N" 3) >"$TOP/cur"
	cat "$TOP/cur" >>"$TOP/e2b-${NAMES[$i]}.txt"
	echo "$(sort -n "$TOP/cur" | sed -n "$((N / 2 + 1))p")" >>"$TOP/e2b-${NAMES[$i]}.rounds"
}
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then side 0; side 1; else side 1; side 0; fi
done
echo "load after exec: $(cut -d' ' -f1-3 /proc/loadavg)"

# CLI start-up: `airlock help`, which needs no daemon; microseconds per run.
for _ in $(seq 100); do
	for i in 0 1; do
		time_us "${BINS[$i]}" help >>"$TOP/cli-${NAMES[$i]}.txt"
	done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

for s in native e2b cli; do
	for name in "${NAMES[@]}"; do
		line="$(printf '%-7s %-6s ' "$s" "$name")$(stats "$TOP/$s-$name.txt")"
		if [ -f "$TOP/$s-$name.rounds" ]; then
			line="$line  median of round p50s $(stats "$TOP/$s-$name.rounds" | cut -d' ' -f2) ms"
		fi
		echo "$line"
	done
done
for i in 0 1; do echo "size ${NAMES[$i]} $(stat -c %s "${BINS[$i]}") bytes"; done

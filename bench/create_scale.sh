#!/usr/bin/env bash
# Cold create against the number of live sandboxes. One private daemon (own state
# directory, socket and cgroup parent; no sandbox networking) with a one-owner cap of
# N + (steps + 1) ROUNDS + 10: ROUNDS sequential creates are timed with 10 sandboxes live and again with N
# live (sandboxes made two at a time, network none, a 2 h idle window; N may be a list of
# steps, "1000,2000", timed at each, with the rate the sandboxes up to it were made at), and the host's
# mount-table lines are counted at each step, since every start reads and copies that
# table (runc, the kernel). With BEFORE_REV set, a daemon built from that revision does
# the same first, so the two slopes print side by side. With NET=default the sandboxes
# get the default network (the daemon's own nftables table, subnet and veth prefix).
# Each side also prints the host mounts a running sandbox keeps and the daemon's own
# CPU per timed create; with PERF=DIR it records the daemon's CPU (perf record -g)
# during each round of timed creates into DIR/LABEL-10.perf and DIR/LABEL-N.perf.
# Needs root and runc; stops each daemon by its pid and removes everything it made. Usage:
#   bash bench/create_scale.sh [N[,N2...] [ROUNDS]]   # N defaults to 200, ROUNDS to 15
#   BEFORE_REV=main bash bench/create_scale.sh 200
#   NET=default BEFORE_REV=main bash bench/create_scale.sh 1000
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

STEPS=${1:-200}
ROUNDS=${2:-15}
N=${STEPS##*,}
BENCH=createscale
. bench/lib/daemon.sh
. bench/lib/timing.sh

if [ "$(id -u)" != 0 ]; then
	echo "bench/create_scale.sh: needs root" >&2
	exit 2
fi

bench_network airlock_scale 10.214.0.0/16 als

# cpu_ticks PID: the process's user and system CPU so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# one LABEL [SRC]: a daemon built from SRC (default this tree), timed at 10 and N live.
one() {
	local label=$1 src=${2:-.}
	TMP=$(mktemp -d /tmp/al-createscale.XXXXXX)
	chmod 711 "$TMP" # the sandboxes (other uids) pass through to their state
	trap daemon_stop EXIT
	pushd "$src" >/dev/null
	daemon_start "live_cap: $((N + ($(tr -cd , <<<"$STEPS" | wc -c) + 2) * ROUNDS + 10))"
	popd >/dev/null
	export AIRLOCK_SOCKET=$SOCK
	make_sandboxes() { seq "$1" "$2" | xargs -P 2 -I{} "$TMP/airlock" create "${NETFLAG[@]}" --idle-suspend 2h "s{}" >/dev/null; }
	timed() { # PREFIX LIVE: ROUNDS sequential creates; prints the daemon's CPU per create (ms)
		local c0 perf=
		if [ -n "${PERF:-}" ]; then
			mkdir -p "$PERF"
			perf record -q -g -F 499 -p "$PID" -o "$PERF/$label-$2.perf" 2>/dev/null &
			perf=$!
			sleep 0.5
		fi
		c0=$(cpu_ticks "$PID")
		for i in $(seq "$ROUNDS"); do time_us "$TMP/airlock" create "${NETFLAG[@]}" --idle-suspend 2h "$1$i" >>"$TMP/$1.txt"; done
		echo $((($(cpu_ticks "$PID") - c0) * 1000 / $(getconf CLK_TCK) / ROUNDS))
		if [ -n "$perf" ]; then
			kill -INT "$perf"
			wait "$perf" || true
		fi
	}
	# mounts_of: the host's mount points naming the sandbox s1 (by its id)
	mounts_of() {
		local id
		id=$("$TMP/airlock" ls | awk '$1 == "s1" { print $2 }')
		awk -v id="$id" 'index($5, id) { n++ } END { print n + 0 }' /proc/self/mountinfo
	}
	make_sandboxes 1 10
	local m10 mN cpu10 cpuN n from=11 live=10 t0 made k=0
	m10=$(wc -l </proc/self/mountinfo)
	cpu10=$(timed a 10)
	printf '%-7s create at 10 live   %s  (host mount table: %d lines; daemon CPU %d ms a create)\n' "$label" "$(stats "$TMP/a.txt")" "$m10" "$cpu10"
	for n in ${STEPS//,/ }; do
		k=$((k + 1))
		t0=$(date +%s.%N)
		make_sandboxes "$from" "$n"
		made=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" -v n=$((n - from + 1)) 'BEGIN { printf "%.1f", n / (t1 - t0) }')
		live=$((live + n - from + 1 + ROUNDS))
		from=$((n + 1))
		mN=$(wc -l </proc/self/mountinfo)
		cpuN=$(timed "b$k-" "$live")
		printf '%-7s create at %-4d live %s  (host mount table: %d lines; daemon CPU %d ms a create; made two at a time up to it at %s a second)\n' "$label" "$live" "$(stats "$TMP/b$k-.txt")" "$mN" "$cpuN" "$made"
		echo "$label at $live over at 10 live, p50: $(awk -v a="$(p50 "$TMP/b$k-.txt")" -v b="$(p50 "$TMP/a.txt")" 'BEGIN { printf "%.2f", a / b }')"
	done
	echo "$label: host mounts of a running sandbox: $(mounts_of); daemon RSS $(awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$PID/status") MiB"
	daemon_stop
	trap - EXIT
	unset PID
}

echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${BEFORE_REV:-}" ]; then
	SRC=$(mktemp -d /tmp/al-createscale-src.XXXXXX)
	git archive "$BEFORE_REV" | tar -x -C "$SRC"
	one before "$SRC"
	rm -rf "$SRC"
fi
one after
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

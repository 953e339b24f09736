#!/usr/bin/env bash
# Cold create against the number of live sandboxes. One private daemon (own state
# directory, socket and cgroup parent; no sandbox networking) with a one-owner cap of
# N + 2 ROUNDS + 10: ROUNDS sequential creates are timed with 10 sandboxes live and again with N
# live (sandboxes made two at a time, network none, a 2 h idle window), and the host's
# mount-table lines are counted at each step, since every start reads and copies that
# table (runc, the kernel). With BEFORE_REV set, a daemon built from that revision does
# the same first, so the two slopes print side by side. Needs root and runc; stops each
# daemon by its pid and removes everything it made. Usage:
#   bash bench/create_scale.sh [N [ROUNDS]]        # N defaults to 200, ROUNDS to 15
#   BEFORE_REV=main bash bench/create_scale.sh 200
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

N=${1:-200}
ROUNDS=${2:-15}
BENCH=createscale
. bench/lib/daemon.sh
. bench/lib/timing.sh

if [ "$(id -u)" != 0 ]; then
	echo "bench/create_scale.sh: needs root" >&2
	exit 2
fi

# one LABEL [SRC]: a daemon built from SRC (default this tree), timed at 10 and N live.
one() {
	local label=$1 src=${2:-.}
	TMP=$(mktemp -d /tmp/al-createscale.XXXXXX)
	chmod 711 "$TMP" # the sandboxes (other uids) pass through to their state
	trap daemon_stop EXIT
	pushd "$src" >/dev/null
	daemon_start "live_cap: $((N + 2 * ROUNDS + 10))"
	popd >/dev/null
	export AIRLOCK_SOCKET=$SOCK
	make_sandboxes() { seq "$1" "$2" | xargs -P 2 -I{} "$TMP/airlock" create --network none --idle-suspend 2h "s{}" >/dev/null; }
	timed() { # PREFIX: ROUNDS sequential creates
		for i in $(seq "$ROUNDS"); do time_us "$TMP/airlock" create --network none --idle-suspend 2h "$1$i" >>"$TMP/$1.txt"; done
	}
	make_sandboxes 1 10
	local m10 mN
	m10=$(wc -l </proc/self/mountinfo)
	timed a
	make_sandboxes 11 "$N"
	mN=$(wc -l </proc/self/mountinfo)
	timed b
	printf '%-7s create at 10 live   %s  (host mount table: %d lines)\n' "$label" "$(stats "$TMP/a.txt")" "$m10"
	printf '%-7s create at %-3d live  %s  (host mount table: %d lines)\n' "$label" "$((N + ROUNDS))" "$(stats "$TMP/b.txt")" "$mN"
	echo "$label at $((N + ROUNDS)) over at 10 live, p50: $(awk -v a="$(p50 "$TMP/b.txt")" -v b="$(p50 "$TMP/a.txt")" 'BEGIN { printf "%.2f", a / b }')"
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

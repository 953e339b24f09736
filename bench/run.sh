#!/usr/bin/env bash
# Reproduces bench/RESULTS.md: builds airlock, starts a private daemon on its own state
# directory, secrets directory, socket, cgroup parent and nftables table (bench/daemon.yaml),
# runs the benchmark driver against it and its peers (bare runc, podman), stops the daemon
# by its pid and removes its state. A daemon already running on the host (the default
# /run/airlock/airlock.sock, /var/lib/airlock) is left alone. Needs root, runc, podman (or
# pass -skip-podman). Extra arguments go to the driver, e.g.
#   bash bench/run.sh -n 50 -json /tmp/albench.json -strict
#
# With AIRLOCK_BENCH_BEFORE set to a git revision, a second private daemon built from
# that revision runs beside the first (its own table, veth prefix, subnet, cgroup parent
# and state); its creates take turns with the first's, so a change is measured against
# the code before it in one run:
#   AIRLOCK_BENCH_BEFORE=main bash bench/run.sh -skip-podman
# or, for terminate's answer and `airlock run -- true` against runc (bench/terminate.go):
#   AIRLOCK_BENCH_BEFORE=main bash bench/run.sh -terminate -skip-podman -n 30
#
# The socket's directory must be root's and writable by root alone (the daemon refuses
# one under /tmp), hence /run/airlock-bench.
set -euo pipefail

EXTRA=("$@") # the driver's
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

RUN=${AIRLOCK_BENCH_RUN:-/run/airlock-bench}
STATE=${AIRLOCK_BENCH_STATE:-/var/lib/airlock-bench}
SOCK=${AIRLOCK_BENCH_SOCKET:-$RUN/api.sock}
LOG=${AIRLOCK_BENCH_LOG:-$RUN/daemon.log}
BIN=${AIRLOCK_BENCH_BIN:-$RUN/airlock} # named airlock: the binaries of cmd/ are built beside it
BEFORE=${AIRLOCK_BENCH_BEFORE:-}

if [ "$(id -u)" != 0 ]; then
	echo "bench/run.sh: needs root (the daemon manages containers, mounts and cgroups)" >&2
	exit 2
fi
case "$STATE" in /var/lib/airlock | /var/lib/airlock/*)
	echo "bench/run.sh: $STATE is the default daemon's state directory; choose another AIRLOCK_BENCH_STATE" >&2
	exit 2
	;;
esac
if [ "$SOCK" = /run/airlock/airlock.sock ]; then
	echo "bench/run.sh: $SOCK is the default daemon's socket; choose another AIRLOCK_BENCH_SOCKET" >&2
	exit 2
fi
install -d -m 0755 "$RUN" "$(dirname "$SOCK")"
DRIVER=$(mktemp "$RUN/driver.XXXXXX")

# Each daemon: NAME STATE SOCKET CGROUP TABLE PREFIX SUBNET, its pid in PIDS.
DAEMONS=("bench $STATE $SOCK airlock-bench airlock_bench alb 10.213.0.0/16")
if [ -n "$BEFORE" ]; then
	DAEMONS+=("before $STATE-before $RUN/before.sock airlock-bench-before airlock_bench_before alc 10.214.0.0/16")
fi
declare -A PIDS

# prepare STATE SOCKET: refuses a state directory with mounts or a socket served on.
prepare() {
	if grep -q " $2\$" /proc/net/unix; then
		echo "bench/run.sh: a daemon is already listening on $2; stop it or set AIRLOCK_BENCH_SOCKET" >&2
		exit 2
	fi
	rm -f "$2" # a stale socket would look like ours below
	if [ -e "$1" ]; then
		if grep -q " $1/" /proc/self/mountinfo; then
			echo "bench/run.sh: $1 has mounts (a daemon still running?); not touching it" >&2
			exit 2
		fi
		rm -rf "$1"
	fi
}

# start NAME STATE SOCKET CGROUP TABLE PREFIX SUBNET BINARY: bench/daemon.yaml with this
# daemon's names and paths, one configuration file, root's.
start() {
	local conf=$RUN/$1.yaml
	sed -e "s|^cgroup_parent:.*|cgroup_parent: $4|" -e "s|^  table:.*|  table: $5|" \
		-e "s|^  host_prefix:.*|  host_prefix: $6|" -e "s|^  subnet:.*|  subnet: $7|" bench/daemon.yaml >"$conf"
	{
		echo "state_dir: $2"
		echo "secrets_dir: $RUN/$1-secrets"
		echo "socket: $3"
	} >>"$conf"
	chmod 0600 "$conf"
	local log=$LOG
	[ "$1" = bench ] || log=$RUN/$1.log
	"$8" serve --config "$conf" >"$log" 2>&1 &
	PIDS[$1]=$!
}

# stop_daemon NAME STATE SOCKET CGROUP TABLE: stops it by its pid, then removes whatever
# a killed driver left (it terminates its sandboxes itself): containers, mounts (deepest
# first), the sandboxes' cgroups, its nftables table (the daemon keeps it across
# restarts), its secrets, then the state directory, never through a mount.
stop_daemon() {
	local pid=${PIDS[$1]:-} state=$2 id m
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" || true
	fi
	if [ -d "$state/runc" ]; then
		for id in $(runc --root "$state/runc" list -q 2>/dev/null); do
			runc --root "$state/runc" delete --force "$id" || true
		done
	fi
	RUNSC=$(command -v runsc || echo /usr/local/libexec/airlock/runsc)
	if [ -d "$state/runsc" ] && [ -x "$RUNSC" ]; then
		for id in $("$RUNSC" --root "$state/runsc" list -quiet 2>/dev/null); do
			"$RUNSC" --root "$state/runsc" delete --force "$id" || true
		done
	fi
	for m in "$state" "$RUN/$1-secrets"; do
		awk -v p="$m" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
			while read -r m; do umount -l "$m" || true; done
	done
	for m in "$4" "$4-runsc"; do
		rmdir /sys/fs/cgroup/*/"$m"/* /sys/fs/cgroup/"$m"/* 2>/dev/null || true
		rmdir /sys/fs/cgroup/*/"$m" /sys/fs/cgroup/"$m" 2>/dev/null || true # the parent, once empty
		rm -f "/run/airlock.names/cgroup-$m.lock" # the daemon's lock on its cgroup parent
	done
	if command -v nft >/dev/null; then nft delete table inet "$5" 2>/dev/null || true; fi
	if grep -q " $state/" /proc/self/mountinfo; then
		echo "bench/run.sh: mounts left under $state; not removing it" >&2
	else
		rm -rf "$state"
	fi
	rm -rf "$RUN/$1-secrets" "$RUN/$1.yaml"
}

stop() {
	local rc=$? d
	for d in "${DAEMONS[@]}"; do
		# shellcheck disable=SC2086
		stop_daemon $d
	done
	rm -rf "$DRIVER" "$RUN/before"
	echo "bench/run.sh: the daemon's log is $LOG" >&2
	exit "$rc"
}
trap stop EXIT

for d in "${DAEMONS[@]}"; do
	# shellcheck disable=SC2086
	set -- $d
	prepare "$2" "$3"
done
set --

echo "bench/run.sh: building $BIN and the driver" >&2
CGO_ENABLED=0 go build -o "$(dirname "$BIN")/" ./cmd/...
go build -o "$DRIVER" ./bench
if [ -n "$BEFORE" ]; then
	echo "bench/run.sh: building $BEFORE into $RUN/before" >&2
	SRC=$(mktemp -d "$RUN/before-src.XXXXXX")
	git archive "$BEFORE" | tar -x -C "$SRC"
	mkdir -p "$RUN/before"
	(cd "$SRC" && CGO_ENABLED=0 go build -o "$RUN/before/" ./cmd/...)
	rm -rf "$SRC"
fi

for d in "${DAEMONS[@]}"; do
	# shellcheck disable=SC2086
	set -- $d
	bin=$BIN
	[ "$1" = bench ] || bin=$RUN/$1/airlock
	start "$@" "$bin"
	# Wait for the daemon to listen (up to 30 s); it may first write the host image.
	for _ in $(seq 300); do
		[ -S "$3" ] && break
		if ! kill -0 "${PIDS[$1]}" 2>/dev/null; then
			echo "bench/run.sh: the $1 daemon exited; its log:" >&2
			cat "$RUN/$1.log" "$LOG" 2>/dev/null >&2
			exit 2
		fi
		sleep 0.1
	done
	[ -S "$3" ] || { echo "bench/run.sh: the $1 daemon did not listen on $3" >&2; exit 2; }
done
set --

ARGS=(-socket "$SOCK" -state-dir "$STATE" -daemon-pid "${PIDS[bench]}" -cgroup-parent airlock-bench)
if [ -n "$BEFORE" ]; then
	ARGS+=(-before-socket "$RUN/before.sock" -before-state-dir "$STATE-before" -before-cgroup-parent airlock-bench-before)
fi
"$DRIVER" "${ARGS[@]}" "${EXTRA[@]}"

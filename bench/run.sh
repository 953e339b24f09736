#!/usr/bin/env bash
# Reproduces bench/RESULTS.md: builds airlock, starts a private daemon on its own state
# directory, secrets directory, socket, cgroup parent and nftables table (bench/daemon.yaml),
# runs the benchmark driver against it and its peers (bare runc, podman), stops the daemon
# by its pid and removes its state. A daemon already running on the host (the default
# /run/airlock/airlock.sock, /var/lib/airlock) is left alone. Needs root, runc, podman (or
# pass -skip-podman). Extra arguments go to the driver, e.g.
#   bash bench/run.sh -n 50 -json /tmp/albench.json -strict
#
# The socket's directory must be root's and writable by root alone (the daemon refuses
# one under /tmp), hence /run/airlock-bench.
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

RUN=${AIRLOCK_BENCH_RUN:-/run/airlock-bench}
STATE=${AIRLOCK_BENCH_STATE:-/var/lib/airlock-bench}
SOCK=${AIRLOCK_BENCH_SOCKET:-$RUN/api.sock}
LOG=${AIRLOCK_BENCH_LOG:-$RUN/daemon.log}
BIN=${AIRLOCK_BENCH_BIN:-$RUN/airlock}
CONFIG=$RUN/airlock.yaml
SECRETS=$RUN/secrets

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
if grep -q " $SOCK\$" /proc/net/unix; then
	echo "bench/run.sh: a daemon is already listening on $SOCK; stop it or set AIRLOCK_BENCH_SOCKET" >&2
	exit 2
fi
rm -f "$SOCK" # a stale socket would look like ours below
if [ -e "$STATE" ]; then
	if grep -q " $STATE/" /proc/self/mountinfo; then
		echo "bench/run.sh: $STATE has mounts (a daemon still running?); not touching it" >&2
		exit 2
	fi
	rm -rf "$STATE"
fi

echo "bench/run.sh: building $BIN and the driver" >&2
CGO_ENABLED=0 go build -o "$BIN" ./cmd/airlock
go build -o "$DRIVER" ./bench

# bench/daemon.yaml plus the paths of this run: one configuration file, root's.
{
	cat bench/daemon.yaml
	echo "state_dir: $STATE"
	echo "secrets_dir: $SECRETS"
	echo "socket: $SOCK"
} >"$CONFIG"
chmod 0600 "$CONFIG"
"$BIN" serve --config "$CONFIG" >"$LOG" 2>&1 &
PID=$!

stop() {
	local rc=$?
	if kill -0 "$PID" 2>/dev/null; then
		kill -TERM "$PID"
		wait "$PID" || true
	fi
	# Whatever a killed driver left (it terminates its sandboxes itself): containers,
	# mounts (deepest first), the sandboxes' cgroups, then the state directory, never
	# through a mount.
	if [ -d "$STATE/runc" ]; then
		for id in $(runc --root "$STATE/runc" list -q 2>/dev/null); do
			runc --root "$STATE/runc" delete --force "$id" || true
		done
	fi
	RUNSC=$(command -v runsc || echo /usr/local/libexec/airlock/runsc)
	if [ -d "$STATE/runsc" ] && [ -x "$RUNSC" ]; then
		for id in $("$RUNSC" --root "$STATE/runsc" list -quiet 2>/dev/null); do
			"$RUNSC" --root "$STATE/runsc" delete --force "$id" || true
		done
	fi
	awk -v p="$STATE/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" || true; done
	if [ -d "$STATE/sandboxes" ]; then
		for id in $(ls "$STATE/sandboxes"); do
			rmdir /sys/fs/cgroup/*/airlock-bench/"$id" /sys/fs/cgroup/airlock-bench/"$id" 2>/dev/null || true
		done
	fi
	if [ -d "$STATE/sandboxes-runsc" ]; then
		for id in $(ls "$STATE/sandboxes-runsc"); do
			rmdir /sys/fs/cgroup/*/airlock-bench-runsc/"$id" /sys/fs/cgroup/airlock-bench-runsc/"$id" 2>/dev/null || true
		done
	fi
	rmdir /sys/fs/cgroup/*/airlock-bench /sys/fs/cgroup/airlock-bench 2>/dev/null || true # the parent, once empty
	rmdir /sys/fs/cgroup/*/airlock-bench-runsc /sys/fs/cgroup/airlock-bench-runsc 2>/dev/null || true
	# The daemon keeps its nftables table across restarts; this one is bench/daemon.yaml's.
	if command -v nft >/dev/null; then nft delete table inet airlock_bench 2>/dev/null || true; fi
	if grep -q " $STATE/" /proc/self/mountinfo; then
		echo "bench/run.sh: mounts left under $STATE; not removing it" >&2
	else
		rm -rf "$STATE"
	fi
	awk -v p="$SECRETS" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" || true; done
	rm -rf "$SECRETS"
	rm -f "$DRIVER" "$CONFIG" /run/airlock.names/cgroup-airlock-bench.lock # the daemon's lock on its cgroup parent
	echo "bench/run.sh: the daemon's log is $LOG" >&2
	exit "$rc"
}
trap stop EXIT

# Wait for the daemon to listen (up to 30 s); it may first write the host image.
for _ in $(seq 300); do
	[ -S "$SOCK" ] && break
	if ! kill -0 "$PID" 2>/dev/null; then
		echo "bench/run.sh: the daemon exited; its log ($LOG):" >&2
		cat "$LOG" >&2
		exit 2
	fi
	sleep 0.1
done
[ -S "$SOCK" ] || { echo "bench/run.sh: the daemon did not listen on $SOCK" >&2; exit 2; }

"$DRIVER" -socket "$SOCK" -state-dir "$STATE" -daemon-pid "$PID" -cgroup-parent airlock-bench "$@"

# Sourced by the bench scripts that run a private daemon: its own state directory,
# socket and cgroup parent under $TMP (which the script made), no sandbox networking
# unless BENCH_NETWORK holds the daemon's network setting (its own table, subnet, prefix).
# The script sets TMP and BENCH (its name, for messages and the cgroup parent) first.

# daemon_start [YAML...] builds airlock and airlockd into $TMP, starts the daemon with the base config and
# any extra YAML lines, and waits for its socket (and for TCP port $WAIT_PORT on
# loopback, if set). It sets PID and SOCK.
daemon_start() {
	SOCK="$TMP/api.sock"
	CGO_ENABLED=0 go build -o "$TMP/" ./cmd/...
	{
		echo "state_dir: $TMP/state"
		echo "secrets_dir: $TMP/secrets"
		echo "socket: $SOCK"
		echo "cgroup_parent: airlock-$BENCH"
		echo "log_level: warn"
		local off="network: {enabled: false}"
		echo "${BENCH_NETWORK:-$off}"
		for line in "$@"; do echo "$line"; done
	} >"$TMP/airlock.yaml"
	"$TMP/airlock" serve --config "$TMP/airlock.yaml" >"$TMP/daemon.log" 2>&1 &
	PID=$!
	for _ in $(seq 300); do
		if [ -S "$SOCK" ] && { [ -z "${WAIT_PORT:-}" ] || (exec 3<>"/dev/tcp/127.0.0.1/$WAIT_PORT") 2>/dev/null; }; then
			return 0
		fi
		if ! kill -0 "$PID" 2>/dev/null; then
			echo "bench/$BENCH: the daemon exited; its log:" >&2
			cat "$TMP/daemon.log" >&2
			exit 2
		fi
		sleep 0.1
	done
	echo "bench/$BENCH: the daemon did not listen on $SOCK" >&2
	exit 2
}

# bench_network TABLE SUBNET PREFIX: with NET=default the sandboxes get the default
# network, in the daemon's own nftables table TABLE (subnet and veth prefix), which
# daemon_stop deletes; otherwise NETFLAG asks each create for network none.
bench_network() {
	NETFLAG=(--network none)
	if [ "${NET:-none}" = default ]; then
		NETFLAG=()
		BENCH_TABLE=$1
		BENCH_NETWORK="network: {enabled: true, subnet: $2, table: $1, host_prefix: $3}"
	fi
}

# daemon_stop stops the daemon by its pid, removes what a killed run left (mounts deepest
# first, containers, cgroups, the nftables table of bench_network) and then $TMP, unless
# a mount is still there.
daemon_stop() {
	if [ -n "${PID:-}" ] && kill -0 "$PID" 2>/dev/null; then
		kill -TERM "$PID"
		wait "$PID" || true
	fi
	if [ -n "${PID:-}" ]; then
		# The host's mounts first, in one pass: each runc reads the whole mount table, so
		# thousands of deletes with every sandbox's mounts still there take minutes more.
		# The containers keep their own copies until they are killed.
		CGO_ENABLED=0 go run ./bench/unmount "$TMP" || true
		if [ -d "$TMP/state/runc" ]; then # in parallel: thousands take minutes one by one
			runc --root "$TMP/state/runc" list -q 2>/dev/null |
				xargs -r -P 8 -I{} runc --root "$TMP/state/runc" delete --force {} || true
		fi
		CGO_ENABLED=0 go run ./bench/unmount "$TMP" || true # any a container's end let go of only then
		rmdir /sys/fs/cgroup/*/"airlock-$BENCH"/* /sys/fs/cgroup/"airlock-$BENCH"/* 2>/dev/null || true
		rmdir /sys/fs/cgroup/*/"airlock-$BENCH" /sys/fs/cgroup/"airlock-$BENCH" 2>/dev/null || true
		rm -f "/run/airlock.names/cgroup-airlock-$BENCH.lock" # the daemon's lock on its cgroup parent
		if [ -n "${BENCH_TABLE:-}" ]; then nft delete table inet "$BENCH_TABLE" 2>/dev/null || true; fi
	fi
	if grep -q " $TMP/" /proc/self/mountinfo; then
		echo "bench/$BENCH: mounts left under $TMP; not removing it" >&2
	else
		rm -rf "$TMP"
	fi
}

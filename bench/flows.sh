#!/usr/bin/env bash
# Measures what one sandbox looping connect/close leaves in the host's connection-tracking
# table (bench/RESULTS.md, "New flows of a sandbox"): a private daemon with sandbox
# networking on names of its own, one sandbox that opens TCP connections to a TEST-NET
# address on port 443 (redirected to the node's proxy, which never dials: the client
# closes before saying where it goes) as fast as it can for SECONDS (default 10), then
# the host's table is read. Needs root and runc. Nothing leaves the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
SECONDS_=${1:-10}
TMP=$(mktemp -d /tmp/airlock-flows.XXXXXX)
chmod 711 "$TMP"
NAME=airlock-flows
BIN="$TMP/airlock"
PID=

cleanup() {
	if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
		"$BIN" --socket "$TMP/api.sock" rm flows >/dev/null 2>&1 || true
		kill -TERM "$PID"
		wait "$PID" || true
	fi
	if [ -d "$TMP/state/runc" ]; then
		for id in $(runc --root "$TMP/state/runc" list -q 2>/dev/null); do runc --root "$TMP/state/runc" delete --force "$id" || true; done
	fi
	awk -v p="$TMP/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" || true; done
	rmdir /sys/fs/cgroup/*/"$NAME"/* /sys/fs/cgroup/"$NAME"/* 2>/dev/null || true
	rmdir /sys/fs/cgroup/*/"$NAME" /sys/fs/cgroup/"$NAME" 2>/dev/null || true
	nft delete table inet airlock_flows 2>/dev/null || true
	rm -f /run/airlock.names/cgroup-$NAME.lock /run/airlock.names/nftables-airlock_flows.lock /run/airlock.names/veth-alf.lock
	grep -q " $TMP/" /proc/self/mountinfo || rm -rf "$TMP"
}
trap cleanup EXIT

CGO_ENABLED=0 go build -o "$TMP/" ./cmd/...
cat >"$TMP/airlock.yaml" <<EOF
state_dir: $TMP/state
secrets_dir: $TMP/secrets
socket: $TMP/api.sock
cgroup_parent: $NAME
log_level: warn
network: {enabled: true, subnet: 10.214.0.0/16, table: airlock_flows, host_prefix: alf}
EOF
"$BIN" serve --config "$TMP/airlock.yaml" >"$TMP/daemon.log" 2>&1 &
PID=$!
for _ in $(seq 300); do [ -S "$TMP/api.sock" ] && break; sleep 0.1; done
al() { "$BIN" --socket "$TMP/api.sock" "$@"; }
al create flows >/dev/null
before=$(cat /proc/sys/net/netfilter/nf_conntrack_count)
out=$(al exec flows -- python3 -c "
import socket, time
end = time.time() + $SECONDS_
ok = fail = 0
me = ''
while time.time() < end:
    s = socket.socket()
    s.settimeout(0.05)
    try:
        s.connect(('198.51.100.7', 443)); ok += 1; me = s.getsockname()[0]
    except OSError:
        fail += 1
    s.close()
print(ok, fail, me)
")
read -r ok fail addr <<<"$out"
after=$(cat /proc/sys/net/netfilter/nf_conntrack_count)
entries=$(grep -c "src=$addr " /proc/net/nf_conntrack || true)
longest=$(awk -v a="src=$addr" '$0 ~ a" " && $6 != "ESTABLISHED" { if ($5 > m) m = $5 } END { print m + 0 }' /proc/net/nf_conntrack)
echo "in $SECONDS_ s one sandbox ($addr) opened $ok connections ($((ok / SECONDS_))/s), $fail attempts dropped"
echo "host conntrack entries: $before before, $after after; $entries from the sandbox; the longest-lived closed one expires in $longest s"

#!/usr/bin/env bash
# Warm exec against the number of live sandboxes, and what an idle sandbox costs the
# host. One private daemon (own state directory, socket and cgroup parent; no sandbox
# networking) with a one-owner cap of N: the warm exec p50 (the Go SDK's Exec of `true`
# over the unix socket, bench/goexec, in one sandbox) and the API floor (GET of that
# sandbox) are timed with 10 sandboxes running, then again once N are running; between
# the two it notes the host's used memory, the daemon's RSS and the agents' RSS, for the
# memory each idle sandbox costs. Sandboxes are made two at a time with network none and
# a 2 h idle window, so none is suspended while it runs; with NET=default they get the
# default network instead (the daemon's own nftables table, subnet and veth prefix).
# Needs root and runc; stops the daemon by its pid and removes everything it made. Usage:
#   bash bench/exec_scale.sh [N [CALLS]]   # N defaults to 500, CALLS to 400
#   NET=default bash bench/exec_scale.sh 5000
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

N=${1:-500}
CALLS=${2:-400}
TMP=$(mktemp -d /tmp/al-execscale.XXXXXX)
chmod 711 "$TMP" # the sandboxes (other uids) pass through to their state
BENCH=execscale
. bench/lib/daemon.sh
PIDMAX=
cleanup() {
	daemon_stop
	if [ -n "$PIDMAX" ]; then echo "$PIDMAX" >/proc/sys/kernel/pid_max; fi
}
trap cleanup EXIT

bench_network airlock_scale 10.214.0.0/16 als

# Each running sandbox takes about 9 of the host's process ids (its agent's threads and
# the kernel's two for its disk): a kernel left at its default kernel.pid_max (32,768,
# where systemd does not raise it to 4,194,304 as it does on Debian) runs out near 4,000
# sandboxes, and then nothing on the host can fork. Raised for the run, put back after.
if [ "$(cat /proc/sys/kernel/pid_max)" -lt $((N * 10 + 16384)) ]; then
	PIDMAX=$(cat /proc/sys/kernel/pid_max)
	echo "kernel.pid_max $PIDMAX is too low for $N sandboxes: 4194304 for this run"
	echo 4194304 >/proc/sys/kernel/pid_max
fi

go build -o "$TMP/goexec" ./bench/goexec
daemon_start "live_cap: $((N + 10))"
export AIRLOCK_SOCKET=$SOCK

make_sandboxes() { # FROM TO
	seq "$1" "$2" | xargs -P 2 -I{} "$TMP/airlock" create "${NETFLAG[@]}" --idle-suspend 2h "s{}" >/dev/null
}

p50() { # LABEL [goexec flags]
	local label=$1
	shift
	"$TMP/goexec" -sandbox s1 -n "$CALLS" -warmup 20 "$@" | sort -n |
		awk -v l="$label" '{a[NR]=$1} END {printf "%-28s p50 %6.2f ms  p90 %6.2f ms  (n=%d)\n", l, a[int(NR/2)]/1000, a[int(NR*0.9)]/1000, NR}'
}

used_kib() { awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} END {print t-a}' /proc/meminfo; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
agents_kib() { # the sum of the agents' RSS, found through each sandbox's recorded peer
	local sum=0 pid
	for f in "$TMP"/state/sandboxes/*/ctl/peer.json; do
		pid=$(sed 's/.*"pid":\([0-9]*\).*/\1/' "$f")
		[ -r "/proc/$pid/status" ] && sum=$((sum + $(rss_kib "$pid")))
	done
	echo "$sum"
}

measure() { # LIVE
	echo "== $1 live sandboxes (load: $(cut -d' ' -f1-3 /proc/loadavg))"
	p50 "warm exec true (sh -c)"
	p50 "warm exec /bin/true" -direct
	p50 "GET sandbox (API floor)" -get
}

make_sandboxes 1 10
measure 10
used0=$(used_kib) rss0=$(rss_kib "$PID")
start=$(date +%s)
disk0=$(df -k --output=used "$TMP" | tail -1)
# A create refused (the node's disk or memory full) is reported, and the sandboxes
# made so far are measured all the same.
make_sandboxes 11 "$N" || echo "some creates were refused (above)"
LIVE=$("$TMP/airlock" ls -o json | grep -o '"state": *"running"' | wc -l)
echo "made $((LIVE - 10)) more sandboxes in $(($(date +%s) - start)) s: $LIVE running"
echo "host disk used: +$((($(df -k --output=used "$TMP" | tail -1) - disk0) / 1024)) MiB"
N=$LIVE
sleep 5 # the agents trim their start-up memory once idle
used1=$(used_kib) rss1=$(rss_kib "$PID") agents=$(agents_kib)
measure "$N"
echo "== memory, $((N - 10)) sandboxes added"
echo "host used (MemTotal - MemAvailable): +$(((used1 - used0) / 1024)) MiB, $(((used1 - used0) / (N - 10))) KiB a sandbox"
echo "daemon RSS: $((rss0 / 1024)) -> $((rss1 / 1024)) MiB"
echo "agents' RSS: $((agents / 1024)) MiB for $N, $((agents / N)) KiB an agent"

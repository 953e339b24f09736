#!/usr/bin/env bash
# Reproduces the "airlock fence from the command line" part of bench/RESULTS.md: as a
# user other than root (nobody), the p50 of N runs of each of
#   plain     /bin/true
#   daemon    airlock fence -- /bin/true, a private daemon putting the fence up
#   reexec    airlock fence -- /bin/true, no daemon: the binary starts itself again
#   airlock   airlock help risk (the binary starting, no daemon, no fence; risk itself
#             asks a daemon since it scores as run does)
# taking turns, so a change of load touches all of them. Needs root (for the private
# daemon and to become nobody) and runc. Usage:
#   bash bench/fence_cli.sh [N]        # N defaults to 100
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

N=${1:-100}
TMP=$(mktemp -d /tmp/al-fencecli.XXXXXX)
chmod 755 "$TMP" # nobody runs the binary in it and works in it
PID=""
BENCH=fencecli
. bench/lib/daemon.sh
trap daemon_stop EXIT

if [ "$(id -u)" != 0 ]; then
	echo "bench/fence_cli.sh: needs root" >&2
	exit 2
fi
daemon_start
WS="$TMP/ws"
mkdir "$WS"
chown 65534:65534 "$WS"
chmod 755 "$TMP/airlock"

as_nobody() { (cd "$WS" && setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin HOME=/nonexistent "$@"); }
# time_one prints how long one run of its command took, in microseconds.
time_one() {
	local start end
	start=$(date +%s%N)
	as_nobody "$@" >/dev/null
	end=$(date +%s%N)
	echo $(((end - start) / 1000))
}

for v in plain daemon reexec airlock; do : >"$TMP/$v.txt"; done
for i in $(seq "$N"); do
	time_one /bin/true >>"$TMP/plain.txt"
	time_one "$TMP/airlock" fence --socket "$SOCK" -- /bin/true >>"$TMP/daemon.txt"
	time_one "$TMP/airlock" fence --socket "$TMP/none.sock" -- /bin/true >>"$TMP/reexec.txt"
	time_one "$TMP/airlock" help risk >>"$TMP/airlock.txt"
done
p50() { sort -n "$1" | awk '{a[NR] = $1} END {printf "%.2f", a[int((NR + 1) / 2)] / 1000}'; }
plain=$(p50 "$TMP/plain.txt")
printf 'nobody, %d runs each, p50 in ms (load %s)\n' "$N" "$(cut -d' ' -f1 /proc/loadavg)"
printf '  /bin/true                         %s\n' "$plain"
for v in daemon reexec airlock; do
	label=$(case $v in
		daemon) echo "airlock fence, the daemon's fence" ;;
		reexec) echo "airlock fence, started again" ;;
		airlock) echo "airlock help risk" ;;
	esac)
	p=$(p50 "$TMP/$v.txt")
	printf '  %-33s %s (+%s)\n' "$label" "$p" "$(awk -v a="$p" -v b="$plain" 'BEGIN {printf "%.2f", a - b}')"
done

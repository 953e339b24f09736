#!/usr/bin/env bash
# CLI start-up before and after a change, side by side: the airlock CLI built from
# BEFORE_REV (default main) and the one built from this tree, against one private daemon
# (this tree's) and one sandbox, with `runc exec` into the same sandbox as the peer. N
# rounds (default 30) take turns, before first in odd rounds and after first in even
# ones; each times `airlock help` (no daemon), `airlock ls` and `airlock exec NAME --
# true` with both CLIs, then `runc exec ID true`. Prints p50 and p90 per series, after
# over before of the p50s, and runc's exec p50 over each CLI's; then the binaries' sizes
# and the agent's resident memory: each tree's agent started on the host alike, and
# this tree's as PID 1 of the sandbox. Needs root and runc. Usage:
#   bash bench/clistart.sh [BEFORE_REV [N]]
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

REV=${1:-main}
N=${2:-30}
TMP=$(mktemp -d /tmp/al-clistart.XXXXXX)
chmod 711 "$TMP"
PID=""
AGENTS=()
BENCH=clistart
. bench/lib/daemon.sh
. bench/lib/timing.sh
stop() {
	local p
	for p in "${AGENTS[@]}"; do kill "$p" 2>/dev/null || true; done
	daemon_stop
}
trap stop EXIT

if [ "$(id -u)" != 0 ]; then
	echo "bench/clistart.sh: needs root" >&2
	exit 2
fi
mkdir "$TMP/src" "$TMP/before"
git archive "$REV" | tar -x -C "$TMP/src"
(cd "$TMP/src" && CGO_ENABLED=0 go build -o "$TMP/before/" ./cmd/...)
daemon_start
BEFORE=$TMP/before/airlock
AFTER=$TMP/airlock
"$AFTER" --socket "$SOCK" create clistart >/dev/null
ID=$("$AFTER" --socket "$SOCK" get clistart -o json | sed -n 's/^  "id": "\(sb_[a-z0-9]*\)",$/\1/p')
RUNC=(runc --root "$TMP/state/runc")
"${RUNC[@]}" exec "airlock-$ID" true

side() { # side NAME BIN: one call of each CLI series with BIN
	time_us "$2" help >>"$TMP/help-$1.txt"
	time_us "$2" --socket "$SOCK" ls >>"$TMP/ls-$1.txt"
	time_us "$2" --socket "$SOCK" exec clistart -- true >>"$TMP/exec-$1.txt"
}
side before "$BEFORE" # one untimed warm-up each
side after "$AFTER"
rm -f "$TMP"/*.txt
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$N"); do
	if [ $((r % 2)) = 1 ]; then
		side before "$BEFORE"
		side after "$AFTER"
	else
		side after "$AFTER"
		side before "$BEFORE"
	fi
	time_us "${RUNC[@]}" exec "airlock-$ID" true >>"$TMP/exec-runc.txt"
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
for s in help ls exec; do
	for name in before after; do
		printf '%-5s %-7s %s\n' "$s" "$name" "$(stats "$TMP/$s-$name.txt")"
	done
	echo "$s after/before p50: $(ratio "$(p50 "$TMP/$s-after.txt")" "$(p50 "$TMP/$s-before.txt")")"
done
printf '%-13s %s\n' "exec runc" "$(stats "$TMP/exec-runc.txt")"
for name in before after; do
	echo "runc exec p50 / airlock exec p50 ($name): $(ratio "$(p50 "$TMP/exec-runc.txt")" "$(p50 "$TMP/exec-$name.txt")")x"
done

for f in "$TMP"/before/* "$TMP/airlock" "$TMP/airlockd" "$TMP/airlock-agent" "$TMP"/state/bin/*; do
	echo "size ${f#"$TMP"/} $(stat -c %s "$f") bytes"
done
rss() { grep -E '^(VmRSS|RssAnon|RssFile)' "/proc/$1/status" | tr -s ' \t\n' ' '; }
# Each tree's agent (before: that tree's airlock agent; after: the copy of airlock-agent the daemon
# installs) on the host, on a socket of its own, a second after it is ready.
i=0
for agent in "$TMP/before/airlock" "$TMP"/state/bin/*; do
	i=$((i + 1))
	"$agent" agent --socket "$TMP/agent$i.sock" --workdir / >/dev/null 2>&1 &
	AGENTS+=($!)
	for _ in $(seq 100); do [ -S "$TMP/agent$i.sock" ] && break; sleep 0.05; done
	sleep 1
	echo "agent on the host, ${agent#"$TMP"/}: $(rss "${AGENTS[-1]}")"
done
echo "agent as the sandbox's PID 1 (after): $(rss "$("${RUNC[@]}" state "airlock-$ID" | sed -n 's/^  "pid": \([0-9]*\),$/\1/p')")"
"$AFTER" --socket "$SOCK" rm clistart >/dev/null

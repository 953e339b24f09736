#!/usr/bin/env bash
# Traces one cold create and its first exec on a private daemon (network none) with the
# kernel's process and write tracepoints, for where a create's time goes (RESULTS.md,
# "Where a cold create's time goes now"). Needs root, runc and perf. Read it with:
#   perf script -i /tmp/create.perf -F comm,pid,time,event,trace | grep -v sys_enter_write
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
TMP=$(mktemp -d /tmp/al-trace.XXXXXX); chmod 711 "$TMP"
BENCH=trace
. bench/lib/daemon.sh
trap daemon_stop EXIT
daemon_start
export AIRLOCK_SOCKET=$SOCK
for i in 1 2 3 4 5; do "$TMP/airlock" create --network none w$i >/dev/null; "$TMP/airlock" exec w$i -- true; "$TMP/airlock" rm --yes w$i >/dev/null 2>&1 || "$TMP/airlock" rm w$i >/dev/null 2>&1 || true; done
sleep 1
perf record -a -e sched:sched_process_exec,sched:sched_process_exit,sched:sched_process_fork,syscalls:sys_enter_write,syscalls:sys_enter_pivot_root -o "${OUT:-/tmp/create.perf}" -- bash -c "sleep 0.3; '$TMP/airlock' create --network none t1 >/dev/null; '$TMP/airlock' exec t1 -- true; sleep 0.2" 2>/dev/null
"$TMP/airlock" rm --yes t1 >/dev/null 2>&1 || true

#!/usr/bin/env bash
# Builds Airlock, starts the daemon on its embedded default (state in /var/lib/airlock,
# API on /run/airlock/airlock.sock) unless one is already running, and runs the main job:
# a real sandbox running Python, its output streamed as it is produced.
#
# A daemon already running keeps the binary it started with; the script says so when
# that is not the binary it just built. RESTART=1 stops that daemon first (its sandboxes
# keep running) and starts the new binary; SERVE_ARGS are extra flags for a daemon the
# script starts, e.g. SERVE_ARGS='--e2b-listen 127.0.0.1:3000'.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
bash scripts/deps.sh
CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/...
sock=${AIRLOCK_SOCKET:-/run/airlock/airlock.sock}
read -ra serve_args <<<"${SERVE_ARGS:-}"

# daemon_pid prints the pid of the daemon serving $sock: it records its pid in the
# socket's lock file.
daemon_pid() {
  local pid
  pid=$(cat "$sock.lock" 2>/dev/null) || return 0
  if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' serve'; then
    echo "$pid"
  fi
}

# running: a daemon answers on $sock. Not status, which fails when any check does (a
# degraded runtime, the network probe): the daemon is up then all the same.
running() { bin/airlock ls -q --socket "$sock" >/dev/null 2>&1; }

if running; then
  pid=$(daemon_pid)
  if [ "${RESTART:-}" = 1 ] && [ -n "$pid" ]; then
    if grep -q 'airlock.service' "/proc/$pid/cgroup" 2>/dev/null; then
      echo "the daemon (pid $pid) runs under systemd: make install && systemctl restart airlock" >&2
      exit 1
    fi
    echo "stopping the airlock daemon (pid $pid); its sandboxes keep running"
    kill "$pid"
    for _ in $(seq 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "the daemon (pid $pid) did not stop within 30s; see /var/lib/airlock/daemon.log" >&2
      exit 1
    fi
  elif [ -n "$pid" ] && ! cmp -s "/proc/$pid/exe" bin/airlockd; then
    echo "note: the airlock daemon already running (pid $pid) still runs the binary it started with,"
    echo "      not the bin/airlockd just built. To run the new one: RESTART=1 make demo"
    echo "      (its sandboxes keep running while the daemon restarts)."
    echo
  fi
  if [ ${#serve_args[@]} -gt 0 ] && running; then
    echo "note: SERVE_ARGS apply to a daemon this script starts; the one running (pid ${pid:-?}) keeps its flags."
    echo "      To restart it with them: RESTART=1 SERVE_ARGS='${SERVE_ARGS}' make demo"
    echo
  fi
fi
if ! running; then
  mkdir -p /var/lib/airlock
  nohup bin/airlock serve --socket "$sock" "${serve_args[@]}" >>/var/lib/airlock/daemon.log 2>&1 &
  echo "started airlock daemon (pid $!, log /var/lib/airlock/daemon.log)"
  for _ in $(seq 100); do
    running && break
    sleep 0.1
  done
fi
bin/airlock status --socket "$sock"
echo
echo '$ airlock run -- python3 -c ...'
status=0
bin/airlock run --socket "$sock" -- python3 -c '
import os, platform, time
print("hello from", platform.node(), "as uid", os.getuid(), flush=True)
for i in range(1, 4):
    print("step", i, "of 3", flush=True)
    time.sleep(0.3)
print("sum of squares below 10**6:", sum(i * i for i in range(10**6)))
' || status=$?
echo
if command -v airlock >/dev/null 2>&1 && [ "$(command -v airlock)" != "$PWD/bin/airlock" ]; then
  echo "The binary just built is $PWD/bin/airlock (the airlock on PATH is $(command -v airlock): run make install to replace it)."
else
  echo "The binary is $PWD/bin/airlock (with bin/airlockd and bin/airlock-agent): run make install to put"
  echo "them on PATH in /usr/local/bin,"
  echo "or make install-service to also run the daemon under systemd."
fi
exit $status

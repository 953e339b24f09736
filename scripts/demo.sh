#!/usr/bin/env bash
# Builds Airlock, starts the daemon on its embedded default (state in /var/lib/airlock,
# API on /run/airlock/airlock.sock) unless one is already running, and runs the main job:
# a real sandbox running Python, its output streamed as it is produced.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
bash scripts/deps.sh
CGO_ENABLED=0 go build -trimpath -o bin/airlock ./cmd/airlock
sock=${AIRLOCK_SOCKET:-/run/airlock/airlock.sock}
if ! bin/airlock status --socket "$sock" >/dev/null 2>&1; then
  mkdir -p /var/lib/airlock
  nohup bin/airlock serve --socket "$sock" >>/var/lib/airlock/daemon.log 2>&1 &
  echo "started airlock daemon (pid $!, log /var/lib/airlock/daemon.log)"
  for _ in $(seq 100); do
    bin/airlock status --socket "$sock" >/dev/null 2>&1 && break
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
  echo "The binary is $PWD/bin/airlock: run make install to put it on PATH as /usr/local/bin/airlock,"
  echo "or make install-service to also run the daemon under systemd."
fi
exit $status

#!/usr/bin/env bash
# Installs gVisor's runsc for Airlock's second runtime, built static (CGO_ENABLED=0) from
# the Go module proxy at a pinned version, at /usr/local/libexec/airlock/runsc. A runsc
# built with cgo cannot run here: its gofer re-executes itself in a root without the
# dynamic loader (see internal/runtime/gvisor). Skipped when a static one is installed.
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin
version=v0.0.0-20260905035102-160fafc42237
dest=/usr/local/libexec/airlock
if [ -x "$dest/runsc" ] && [ "$(cat "$dest/runsc.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
echo "building gVisor runsc $version (static; a few minutes the first time)"
mkdir -p "$dest"
CGO_ENABLED=0 GOBIN="$dest" go install "gvisor.dev/gvisor/runsc@$version"
echo "$version" > "$dest/runsc.version"
"$dest/runsc" --version | head -1

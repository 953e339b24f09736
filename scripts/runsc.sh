#!/usr/bin/env bash
# Installs gVisor's runsc for Airlock's second runtime, built static (CGO_ENABLED=0) from
# the Go module proxy at a pinned version, at /usr/local/libexec/airlock/runsc (or under
# AIRLOCK_RUNSC_DIR). A runsc built with cgo cannot run here: its gofer re-executes itself
# in a root without the dynamic loader (see internal/runtime/gvisor). Its seccomp filters
# are precompiled into it (scripts/_runsc/precompile.go), as gVisor's own releases do:
# otherwise each sandbox start builds them first. Skipped when this build is installed.
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin CGO_ENABLED=0
version=v0.0.0-20260905035102-160fafc42237
build="$version precompiled-seccomp"
dest=${AIRLOCK_RUNSC_DIR:-/usr/local/libexec/airlock}
if [ -x "$dest/runsc" ] && [ "$(cat "$dest/runsc.version" 2>/dev/null)" = "$build" ]; then
  exit 0
fi
echo "building gVisor runsc $version (static, seccomp filters precompiled; several minutes the first time)"
here=$(cd "$(dirname "$0")" && pwd)
mod=$(cd / && GOFLAGS=-mod=mod go mod download -json "gvisor.dev/gvisor@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$mod" ] || { echo "gvisor.dev/gvisor@$version: not downloaded" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$mod" "$work/gvisor"
chmod -R u+w "$work/gvisor"
mkdir "$work/gvisor/airlock-precompile"
cp "$here/_runsc/precompile.go" "$work/gvisor/airlock-precompile/main.go"
(cd "$work/gvisor" && go run ./airlock-precompile && rm -r airlock-precompile &&
  go build -trimpath -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$version" -o "$work/runsc" ./runsc)
mkdir -p "$dest"
mv "$work/runsc" "$dest/runsc.new"
mv "$dest/runsc.new" "$dest/runsc"
echo "$build" > "$dest/runsc.version"
"$dest/runsc" --version | head -1

#!/usr/bin/env bash
# Installs what Airlock needs on a Debian 12 host and is not there yet: runc (the OCI
# runtime), python3 (the demo's code runs on the host image's /usr), iproute2 and curl,
# and for the tests python3-pytest, npm, postgresql and chromium (the web console's browser test).
set -euo pipefail
need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/bin/python3 ] || need+=(python3)
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need+=(python3-pytest) # the Python SDK's tests
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux) # the cluster tests start each node in a network namespace
command -v resize2fs >/dev/null 2>&1 || need+=(e2fsprogs) # sandbox disks and volumes: mkfs.ext4, resize2fs, e2fsck
command -v npm >/dev/null 2>&1 || need+=(nodejs npm) # the MCP test drives airlock mcp with an npm client
command -v chromium >/dev/null 2>&1 || need+=(chromium) # the web console's test drives a headless browser
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need+=(postgresql) # the PostgreSQL store's tests start their own server
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
  echo "Go 1.26 is required (https://go.dev/dl/), at /usr/local/go or on PATH" >&2
  exit 1
fi
# weed (SeaweedFS) is the S3 server the object store's tests run against. Its module has
# replace directives, so `go install mod@version` refuses it: it is built from a copy of
# the pinned module, once; a stamp beside the binary records the version it was built from.
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6
export PATH=$PATH:/usr/local/go/bin
weed_bin="$(go env GOPATH)/bin/weed"
if [ "$(cat "$weed_bin.version" 2>/dev/null)" != "$WEED_VERSION" ] || [ ! -x "$weed_bin" ]; then
  echo "building weed $WEED_VERSION (several minutes)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/seaweedfs/seaweedfs@$WEED_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  cp -r "$src/." "$work" && chmod -R u+w "$work"
  mkdir -p "$(dirname "$weed_bin")"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -o "$weed_bin.new" ./weed)
  mv "$weed_bin.new" "$weed_bin"
  echo "$WEED_VERSION" >"$weed_bin.version"
fi

#!/usr/bin/env bash
# Runs the tests of the layers above the runtime (fake runtime, manager, HTTP server,
# CLI) as an unprivileged user, proving they need no root: a change to a handler, the
# SDK or a CLI verb can be checked anywhere. Run as root (it drops to nobody); as
# another user it runs them as that user.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
pkgs=(internal/runtime/fake internal/manager internal/server internal/cli)
# The manager's node-loss tests run nodes on a PostgreSQL and a SeaweedFS they start;
# those servers, not the layers under test, are what an unprivileged user cannot share
# with root's (weed's sockets in /tmp), and the tests run as root in the main line.
# The server's volume tests mount real ext4 images on loop devices, and the manager's
# volume reconcile test unmounts what it removes (root's work), over the fake runtime.
skip='^(TestLost(NodeSandboxesMarkedLost|SandboxResumesElsewhere)|TestVolume(QuotaAndAudit|QuotaHoldsUnderConcurrentCreates|WriterLeaseUnderConcurrentAttaches|CreateSkipsThePool|ForkGetsOnlyWhatItAsks)|TestVolumesOutOfReachFromInside|TestReconcileVolumesKeepsMountsOfSandboxesItCannotRead)$'
bin=$(mktemp -d /tmp/airlock-rootless.XXXXXX)
trap 'rm -rf "$bin"' EXIT
chmod 755 "$bin"
for p in "${pkgs[@]}"; do
  go test -c -o "$bin/$(basename "$p").test" "./$p"
done
for p in "${pkgs[@]}"; do
  t="$bin/$(basename "$p").test"
  # Each runs in a directory of its own holding a copy of its package's testdata (golden
  # files), as go test runs it in the package's directory, laid out as in the repository
  # beside a copy of api/ (the documents the route tests read).
  dir="$bin/tree/$p"
  mkdir -p "$dir"
  if [ -d "$p/testdata" ]; then cp -r "$p/testdata" "$dir/"; fi
  [ -d "$bin/tree/api" ] || cp -r api "$bin/tree/api"
  chmod -R a+rX "$bin/tree"
  echo "rootless: $p"
  if [ "$(id -u)" = 0 ]; then
    (cd "$dir" && setpriv --reuid=65534 --regid=65534 --clear-groups env HOME=/tmp "$t" -test.count=1 -test.skip "$skip")
  else
    (cd "$dir" && "$t" -test.count=1 -test.skip "$skip")
  fi
done

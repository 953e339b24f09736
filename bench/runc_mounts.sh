#!/usr/bin/env bash
# What each host mount costs a container start, without Airlock: a bare `runc run` of
# /bin/true (the default `runc spec`, the host's / as a read-only root) timed in a
# private mount namespace holding 0, N and 2N extra tmpfs mounts. runc reads the whole
# mount table several times while it builds a container and the kernel copies it into
# the container's new namespace, so the time grows with the table's length; every mount
# a running sandbox keeps on the host lengthens it. The extra mounts live only in the
# private namespace and go with it. Needs root, runc and python3. Usage:
#   bash bench/runc_mounts.sh [N [RUNS]]   # N defaults to 3000, RUNS to 12
set -euo pipefail

N=${1:-3000}
RUNS=${2:-12}
if [ "$(id -u)" != 0 ]; then
	echo "bench/runc_mounts.sh: needs root" >&2
	exit 2
fi
TMP=$(mktemp -d /tmp/al-runcmounts.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bundle/rootfs" "$TMP/mp"
(cd "$TMP/bundle" && runc spec)
sed -i -e 's/"terminal": true/"terminal": false/' -e 's/"readonly": false/"readonly": true/' \
	-e 's/"sh"/"\/bin\/true"/' "$TMP/bundle/config.json"

one() { # EXTRA: in a namespace of its own, EXTRA tmpfs mounts, then RUNS timed runs
	unshare -m --propagation private bash -s "$TMP" "$1" "$RUNS" <<'EOF'
set -e
TMP=$1 EXTRA=$2 RUNS=$3
mount --bind / "$TMP/bundle/rootfs"
mount -t tmpfs -o size=1m none "$TMP/mp"
# mount(8) reads the whole table for each mount; python's ctypes calls mount(2) alone.
python3 - "$TMP/mp" "$EXTRA" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for i in range(1, int(sys.argv[2]) + 1):
    p = os.path.join(sys.argv[1], str(i))
    os.mkdir(p)
    if libc.mount(b"none", p.encode(), b"tmpfs", 0, b"size=4k") != 0:
        sys.exit("mount %s: %s" % (p, os.strerror(ctypes.get_errno())))
PY
lines=$(wc -l </proc/self/mountinfo)
cd "$TMP/bundle"
for k in $(seq "$RUNS"); do
	t0=$EPOCHREALTIME
	runc --root "$TMP/state" run "al-runcmounts-$$-$k" >/dev/null
	t1=$EPOCHREALTIME
	echo $((${t1/./} - ${t0/./}))
done | sort -n | awk -v l="$lines" '{ v[NR] = $1 } END { printf "host mount table %6d lines: runc run /bin/true p50 %.1f ms (n=%d)\n", l, v[int(NR / 2) + 1] / 1000, NR }'
EOF
}

echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for extra in 0 "$N" $((2 * N)); do one "$extra"; done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"

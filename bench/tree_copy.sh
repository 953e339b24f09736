#!/usr/bin/env bash
# Reproduces the "Directory trees: cp -r against tar through exec" section of
# bench/RESULTS.md: a tree of N small files (default 10000, in 100 directories, 1-4 KiB
# each) copied into a sandbox and back with `airlock cp -r`, and the same with tar and
# `airlock exec`, on one sandbox of one private daemon, the two taking turns for R
# rounds (default 5). Out: airlock exec SB -- tar -c | tar -x. In: exec --stdin takes
# at most 1 MiB (it travels in the JSON request), so the tar way in is tar -c to a
# file, airlock cp of it, airlock exec SB -- tar -x. Target: cp -r not slower than
# the tar way (ratio ≤ 1.0).
#
# Builds airlock and starts a private daemon (own state directory, socket and cgroup
# parent; no sandbox networking), stops it by its pid and removes its state. Needs
# root and runc. Usage:
#   bash bench/tree_copy.sh [N] [R]
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

N=${1:-10000}
R=${2:-5}
TMP=$(mktemp -d /tmp/al-tree.XXXXXX)
chmod 711 "$TMP"
PID=""
SB="tree-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"

BENCH=treecopy
. bench/lib/daemon.sh
. bench/lib/timing.sh

stop() {
	local rc=$?
	if [ -n "${SOCK:-}" ] && [ -S "$SOCK" ]; then
		"$TMP/airlock" --socket "$SOCK" rm "$SB" >/dev/null 2>&1 || true
	fi
	daemon_stop
	exit "$rc"
}
trap stop EXIT

if [ "$(id -u)" != 0 ]; then
	echo "bench/tree_copy.sh: needs root for its private daemon" >&2
	exit 2
fi
daemon_start
AL=("$TMP/airlock" --socket "$SOCK")

SRC="$TMP/src"
/usr/bin/python3 - "$SRC" "$N" <<'PY'
import os, random, sys
top, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(1)
for i in range(n):
    d = os.path.join(top, f"d{i % 100:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}"), "wb") as f:
        f.write(rnd.randbytes(rnd.randint(1024, 4096)))
PY
BYTES=$(du -sb "$SRC" | cut -f1)
"${AL[@]}" create "$SB" --network none --disk 4GiB >/dev/null

cp_in() { "${AL[@]}" cp -r "$SRC" "$SB:/root/cp$1"; }
tar_in() {
	tar -C "$SRC" -cf "$TMP/in.tar" . && "${AL[@]}" cp "$TMP/in.tar" "$SB:/root/in.tar" &&
		"${AL[@]}" exec "$SB" -- sh -c "mkdir -p /root/tar$1 && tar -C /root/tar$1 -xf /root/in.tar && rm /root/in.tar"
	rm -f "$TMP/in.tar"
}
cp_out() { "${AL[@]}" cp -r "$SB:/root/cp$1" "$TMP/outcp$1"; }
tar_out() { mkdir -p "$TMP/outtar$1" && "${AL[@]}" exec "$SB" -- tar -C "/root/tar$1" -cf - . | tar -C "$TMP/outtar$1" -xf -; }

for f in cpin tarin cpout tarout; do : >"$TMP/$f.txt"; done
for i in $(seq "$R"); do
	time_us cp_in "$i" >>"$TMP/cpin.txt"
	time_us tar_in "$i" >>"$TMP/tarin.txt"
	time_us cp_out "$i" >>"$TMP/cpout.txt"
	time_us tar_out "$i" >>"$TMP/tarout.txt"
	for way in cp tar; do
		diff -r "$SRC" "$TMP/out$way$i" >/dev/null || { echo "bench/tree_copy.sh: the $way round trip $i differs" >&2; exit 1; }
	done
	rm -rf "$TMP/outcp$i" "$TMP/outtar$i"
	"${AL[@]}" exec "$SB" -- rm -rf "/root/cp$i" "/root/tar$i" >/dev/null
done

echo "tree: $N files in 100 directories, $BYTES bytes; $R rounds each, taking turns"
for dir in in out; do
	cp=$(p50 "$TMP/cp$dir.txt")
	tar=$(p50 "$TMP/tar$dir.txt")
	printf "%-4s cp -r: %s   tar|exec: %s   cp/tar = %.2f\n" "$dir" "$(stats "$TMP/cp$dir.txt")" "$(stats "$TMP/tar$dir.txt")" \
		"$(echo "$cp $tar" | awk '{ print $1 / $2 }')"
done

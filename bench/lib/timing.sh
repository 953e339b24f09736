# Sourced by the bench scripts that time commands from the shell.

# time_us CMD... runs CMD (its output discarded) and prints how long it took, in
# microseconds. It fails if CMD does.
time_us() {
	local t0 t1
	t0=$EPOCHREALTIME
	"$@" >/dev/null
	t1=$EPOCHREALTIME
	echo $((${t1/./} - ${t0/./}))
}

# stats FILE prints the p50 and p90 (ms) of FILE's lines of microseconds.
stats() {
	sort -n "$1" | awk '{ v[NR] = $1 } END { printf "p50 %.2f ms  p90 %.2f ms  n=%d", v[int(NR * 0.5) + 1] / 1000, v[int(NR * 0.9) + 1] / 1000, NR }'
}

# p50 FILE prints the p50 (ms) of FILE's lines of microseconds.
p50() { stats "$1" | cut -d' ' -f2; }

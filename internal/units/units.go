// Package units reads the byte sizes a user writes, on the command line and in the
// daemon's configuration alike. It follows docker's convention: every unit counts in
// 1024s, so 1G, 1GB, 1GiB and 1073741824 are the same size. It imports nothing of
// Airlock and guards no hostile surface: its callers bound the sizes it returns.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// Forms says which sizes ParseSize accepts; every refusal repeats it.
const Forms = "use bytes (1048576) or a number with a unit: 512M, 1G, 1.5GiB " +
	"(K, M, G and T count in 1024s, with or without B or iB, as docker's do: 1G = 1GB = 1GiB)"

var multipliers = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "ti": 1 << 40, "tib": 1 << 40,
}

// Max bounds parsed sizes well inside int64.
const Max = 1 << 60

// ParseSize reads a byte size such as 512M, 1G, 1.5GiB, 2GB or 1048576. Zero is a size;
// a caller that needs more says so.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := multipliers[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("invalid size %q: %s", s, Forms)
	}
	var v float64
	if mult == 1 {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid size %q: bytes must be a whole number; %s", s, Forms)
		}
		v = float64(n)
	} else {
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid size %q: %s", s, Forms)
		}
		v = f * mult
	}
	if v > Max {
		return 0, fmt.Errorf("invalid size %q: must be at most 1EiB", s)
	}
	return int64(v), nil
}

// FormatSize writes a size the way ParseSize reads it back, in powers of 1024:
// 512MiB, 1.5GiB, 100B.
func FormatSize(n int64) string {
	names := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	f, i := float64(n), 0
	for (f >= 1024 || f <= -1024) && i < len(names)-1 {
		f /= 1024
		i++
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + names[i]
}

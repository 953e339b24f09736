package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// sizeForms says which sizes parseSize accepts; every refusal repeats it.
const sizeForms = "use bytes (1048576) or a number with a unit: 512M, 1G, 1.5GiB " +
	"(K, M, G, T and KiB, MiB, GiB, TiB count in 1024s; KB, MB, GB, TB in 1000s)"

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// maxSize bounds parsed sizes well inside int64.
const maxSize = 1 << 60

// parseSize reads a byte size such as 512M, 1G, 1.5GiB or 1048576.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("invalid size %q: %s", s, sizeForms)
	}
	var v float64
	if mult == 1 {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid size %q: bytes must be a whole number; %s", s, sizeForms)
		}
		v = float64(n)
	} else {
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid size %q: %s", s, sizeForms)
		}
		v = f * mult
	}
	if v < 1 || v > maxSize {
		return 0, fmt.Errorf("invalid size %q: must be between 1 byte and 1EiB", s)
	}
	return int64(v), nil
}

// sizeFlag is a flag.Value holding a size in bytes (0 when not given).
type sizeFlag int64

func (f *sizeFlag) String() string {
	if f == nil || *f == 0 {
		return ""
	}
	return formatSize(int64(*f))
}

func (f *sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f = sizeFlag(n)
	return nil
}

// parseKV splits "K=V"; the key must not be empty, the value may be.
func parseKV(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	return k, v, nil
}

// kvFlag is a repeatable flag.Value of KEY=VALUE pairs; a repeated key keeps the last value.
type kvFlag map[string]string

func (f kvFlag) String() string {
	keys := sortedKeys(f)
	for i, k := range keys {
		keys[i] = k + "=" + f[k]
	}
	return strings.Join(keys, ",")
}

func (f kvFlag) Set(s string) error {
	k, v, err := parseKV(s)
	if err != nil {
		return err
	}
	f[k] = v
	return nil
}

// orNil returns the map, or nil when it is empty (so JSON omits it).
func (f kvFlag) orNil() map[string]string {
	if len(f) == 0 {
		return nil
	}
	return f
}

// listFlag is a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string     { return strings.Join(*f, ",") }
func (f *listFlag) Set(s string) error { *f = append(*f, s); return nil }

// errLocalPath means an argument names no sandbox.
var errLocalPath = errors.New("local path")

// splitRemote reads a cp argument of the form NAME:/path. An argument with no colon, or
// with a slash before its first colon (./a:b), is a local path: errLocalPath. A remote
// path must be absolute.
func splitRemote(arg string) (name, path string, err error) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.ContainsRune(arg[:i], '/') {
		return "", arg, errLocalPath
	}
	name, path = arg[:i], arg[i+1:]
	if !strings.HasPrefix(path, "/") {
		return "", "", fmt.Errorf("%q: the path in the sandbox must be absolute (NAME:/path)", arg)
	}
	return name, path, nil
}

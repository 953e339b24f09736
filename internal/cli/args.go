package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/units"
)

// parseSize reads a byte size of at least one byte (see units.ParseSize).
func parseSize(s string) (int64, error) {
	n, err := units.ParseSize(s)
	if err == nil && n < 1 {
		err = fmt.Errorf("invalid size %q: must be at least 1 byte", s)
	}
	return n, err
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

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*f = append(*f, s)
		}
	}
	return nil
}

// repeatFlag is a repeatable flag that takes each value whole: an egress rule's commas
// separate its own ports and methods (api.example.com:443,8443/GET,POST).
type repeatFlag []string

func (f *repeatFlag) String() string { return strings.Join(*f, " ") }

func (f *repeatFlag) Set(v string) error {
	if v = strings.TrimSpace(v); v != "" {
		*f = append(*f, v)
	}
	return nil
}

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

package image

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Limits bound what an import or a pull may cost the host. A zero field takes its
// default.
type Limits struct {
	// Upload is the most bytes one uploaded archive may have; the HTTP edge enforces it.
	Upload int64
	// Unpacked is the most bytes one import may unpack: the contents of its layers (every
	// entry counted at its full size, so a sparse file costs what it claims), and, apart,
	// a compressed archive decompressed before it is read.
	Unpacked int64
	// Ratio is the most decompressed bytes per compressed byte any compressed stream of
	// an import may give, checked once the stream has given ratioGrace bytes.
	Ratio int64
	// Quota is the most bytes of images one owner may keep (each image counted at its
	// unpacked size, and so is each layer a pull left pending); administrators are not
	// held to it.
	Quota int64
	// RegistryTimeout is the longest a registry may take to accept a connection, to
	// answer a request with its headers, or to send the next bytes of an answer.
	RegistryTimeout time.Duration
	// Setuid is what becomes of setuid and setgid bits in a layer: SetuidKeep (the
	// default; they act only inside the sandbox's user namespace), SetuidStrip or
	// SetuidRefuse (the import or pull fails, naming the file).
	Setuid string
	// Devices is what becomes of device nodes in a layer: DevicesSkip (the default; a
	// sandbox's devices come from its runtime, never from an image) or DevicesRefuse.
	Devices string
	// KeepPulledBlobs keeps the blobs of pulled layers as they came, beside the
	// unpacked layers, so a pulled image can be exported with its digest. It costs the
	// disk space and the writes of every blob again. Imported images always keep theirs.
	KeepPulledBlobs bool
}

// What a store does with device nodes in layers.
const (
	DevicesSkip   = "skip"
	DevicesRefuse = "refuse"
)

// What a store does with setuid and setgid files.
const (
	SetuidKeep   = "keep"
	SetuidStrip  = "strip"
	SetuidRefuse = "refuse"
)

// DefaultLimits are the limits of a store nobody configured.
func DefaultLimits() Limits {
	return Limits{Upload: 2 << 30, Unpacked: 8 << 30, Ratio: 100, Quota: 20 << 30, RegistryTimeout: 30 * time.Second}
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Upload <= 0 {
		l.Upload = d.Upload
	}
	if l.Unpacked <= 0 {
		l.Unpacked = d.Unpacked
	}
	if l.Ratio <= 0 {
		l.Ratio = d.Ratio
	}
	if l.Quota <= 0 {
		l.Quota = d.Quota
	}
	if l.RegistryTimeout <= 0 {
		l.RegistryTimeout = d.RegistryTimeout
	}
	return l
}

// ratioGrace is how much a stream may give before its ratio is checked: a small layer
// of empty files and directories compresses far better than any real image.
const ratioGrace = 4 << 20

// tarEntryCost is what each layer entry costs beyond its contents: its header block.
const tarEntryCost = 512

// budget is the unpacked bytes an import may still write; the layers of a pull share
// it from goroutines of their own.
type budget struct {
	setuid      string // Limits.Setuid
	devices     string // Limits.Devices
	mu          sync.Mutex
	left, limit int64
	quota       bool  // the limit is what the owner's quota leaves
	used        int64 // with quota: the owner's usage when the import began
	owner       string
}

// charge takes n bytes from the budget and says which limit they exceed, if any.
func (b *budget) charge(n int64) error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	b.left -= n
	left := b.left
	b.mu.Unlock()
	if left >= 0 {
		return nil
	}
	if b.quota {
		return quotaError(b.owner, b.used, b.limit+b.used)
	}
	return errdefs.Invalid("the image unpacks to more than %s, the most one import may unpack on this node", formatSize(b.limit))
}

func quotaError(owner string, used, quota int64) error {
	return errdefs.Quota("the image does not fit in the image storage quota of owner %q: %s of %s in use", owner, formatSize(used), formatSize(quota)).
		WithDetails(map[string]any{"used": used, "quota": quota})
}

// inflateGuard reads a decompressed stream and fails it as soon as it gives more than
// max bytes (when max > 0) or more than ratio times the compressed bytes read so far.
type inflateGuard struct {
	r     io.Reader
	in    *int64 // compressed bytes read so far
	out   int64
	max   int64
	ratio int64
	what  string // "the archive" or "a layer"
}

func (g *inflateGuard) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	g.out += int64(n)
	if g.max > 0 && g.out > g.max {
		return n, errdefs.Invalid("%s decompresses to more than %s, the most one import may unpack on this node", g.what, formatSize(g.max))
	}
	if g.ratio > 0 && g.out > ratioGrace && g.out > g.ratio*max(*g.in, 1) {
		return n, errdefs.Invalid("%s decompresses more than %d times over (%s from %s so far); the most allowed is %d:1",
			g.what, g.ratio, formatSize(g.out), formatSize(*g.in), g.ratio)
	}
	return n, err
}

// formatSize prints n bytes in binary units.
func formatSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %ciB", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %ciB", f, units[i])
}

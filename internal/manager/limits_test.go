package manager

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// TestLimitsBeyondTheHostAreRefused: a create asking for more CPU or memory than the host
// has, or for a lifetime of zero, is refused with what is allowed, and changes nothing.
func TestLimitsBeyondTheHostAreRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HostCPU, cfg.HostMemory = 2, 23<<30
	fd := newFake(t)
	m, st := newManagerWith(t, cfg, fd)
	ctx := context.Background()
	tests := []struct {
		name  string
		req   CreateRequest
		wants []string // in the message
	}{
		{"cpu beyond the host", CreateRequest{Name: "a", Limits: store.Limits{CPU: 4}},
			[]string{"cpu 4 is more than this host has: 2 cores", "ask for 0.01 to 2"}},
		{"memory beyond the host", CreateRequest{Name: "a", Limits: store.Limits{Memory: 200 << 30}},
			[]string{"memory 200GiB is more than this host has: 23GiB", "ask for 16MiB to 23GiB"}},
		{"cpu beyond the maximum and the host", CreateRequest{Name: "a", Limits: store.Limits{CPU: 100}},
			[]string{"cpu 100 is more than this host has: 2 cores"}},
		{"tiny memory", CreateRequest{Name: "a", Limits: store.Limits{Memory: 1 << 20}},
			[]string{"memory 1MiB is below the minimum of 16MiB", "ask for 16MiB to 23GiB"}},
		{"zero lifetime", CreateRequest{Name: "a", MaxLifetime: "0s"},
			[]string{"max_lifetime 0s is out of range: from 1m0s to 720h0m0s"}},
	}
	for _, tt := range tests {
		_, _, err := m.Create(ctx, local, tt.req)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want invalid_argument", tt.name, err)
			continue
		}
		for _, w := range tt.wants {
			if !strings.Contains(errdefs.Message(err), w) {
				t.Errorf("%s: message %q, want it to say %q", tt.name, errdefs.Message(err), w)
			}
		}
	}
	if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{}); len(list) != 0 {
		t.Errorf("refused creates left %d sandboxes", len(list))
	}
	if ids, _ := fd.List(ctx); len(ids) != 0 {
		t.Errorf("refused creates made host resources %v", ids)
	}

	// Within the host, the same create succeeds; with no host size known, only the
	// configured maxima bound it.
	if _, sb, err := m.Create(ctx, local, CreateRequest{Name: "fits", Limits: store.Limits{CPU: 2, Memory: 23 << 30}}); err != nil || sb.Limits.CPU != 2 {
		t.Errorf("create within the host: %v", err)
	}
	m2, _ := newManagerWith(t, DefaultConfig(), newFake(t))
	if _, _, err := m2.Create(ctx, local, CreateRequest{Name: "big", Limits: store.Limits{CPU: 4}}); err != nil {
		t.Errorf("create with no host size known: %v", err)
	}
}

func TestHostSize(t *testing.T) {
	cpus, mem := HostSize()
	if cpus < 1 || mem < 16<<20 {
		t.Errorf("HostSize() = %g cores, %d bytes; want this host's figures", cpus, mem)
	}
}

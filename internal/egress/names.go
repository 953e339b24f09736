package egress

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// ResolvedNames remembers which names the node's DNS server answered each sandbox with
// which addresses, so that a plain TCP connection to an address (which carries no host
// name) can be decided by the names the sandbox looked up to get it: a rule
// "db.example.com:5432" then allows TCP to the addresses db.example.com resolved to.
// Only names the sandbox's policy let it resolve ever get in, with the answers of the
// node's own upstream resolver, so a sandbox cannot plant a mapping of its own.
type ResolvedNames struct {
	// MinTTL is how long a mapping lasts at least, whatever the answer's TTL: clients
	// keep addresses longer than their records say. 0 means 10 minutes.
	MinTTL time.Duration
	// PerSandbox bounds the mappings kept for one sandbox; the one that expires first
	// goes when a new one would exceed it. 0 means 4096.
	PerSandbox int

	mu  sync.Mutex
	now func() time.Time // tests replace it
	sbs map[string]map[resolvedKey]time.Time
}

type resolvedKey struct {
	addr netip.Addr
	name string
}

// Add records that sandbox resolved name to addr, for ttl at least MinTTL.
func (r *ResolvedNames) Add(sandbox, name string, addr netip.Addr, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	if r.sbs == nil {
		r.sbs = map[string]map[resolvedKey]time.Time{}
	}
	m := r.sbs[sandbox]
	if m == nil {
		m = map[resolvedKey]time.Time{}
		r.sbs[sandbox] = m
	}
	ttl = max(ttl, r.MinTTL)
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	key := resolvedKey{addr.Unmap().WithZone(""), name}
	if _, ok := m[key]; !ok && len(m) >= r.limit() {
		r.evict(m, now)
	}
	if until := now.Add(ttl); until.After(m[key]) {
		m[key] = until
	}
}

// evict drops the expired mappings of m or, if none has, the one that expires first.
func (r *ResolvedNames) evict(m map[resolvedKey]time.Time, now time.Time) {
	var first resolvedKey
	var firstAt time.Time
	dropped := false
	for k, until := range m {
		if !until.After(now) {
			delete(m, k)
			dropped = true
		} else if firstAt.IsZero() || until.Before(firstAt) {
			first, firstAt = k, until
		}
	}
	if !dropped && !firstAt.IsZero() {
		delete(m, first)
	}
}

// Names returns the names sandbox resolved to addr that have not expired.
func (r *ResolvedNames) Names(sandbox string, addr netip.Addr) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	addr = addr.Unmap().WithZone("")
	var out []string
	for k, until := range r.sbs[sandbox] {
		if k.addr == addr && until.After(now) {
			out = append(out, k.name)
		}
	}
	slices.Sort(out)
	return out
}

// Forget drops every mapping of sandbox.
func (r *ResolvedNames) Forget(sandbox string) {
	r.mu.Lock()
	delete(r.sbs, sandbox)
	r.mu.Unlock()
}

func (r *ResolvedNames) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

func (r *ResolvedNames) limit() int {
	if r.PerSandbox > 0 {
		return r.PerSandbox
	}
	return 4096
}

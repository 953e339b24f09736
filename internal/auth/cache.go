package auth

import (
	"context"
	"slices"
	"sync"
	"time"
)

// principals keeps the principal of each identity and the identity of each mapped local
// uid, so a request does not read the identity, every custom role and (for a uid not in
// the configuration) every identity from the store again. Every change to identities or
// roles made on this node goes through this package and calls invalidate once it is
// stored; an entry is kept only when no change happened while it was read, so a
// principal read before a change is never kept after it. A removed identity or a role
// taken away is refused on this node's very next call. A change made by another node
// sharing the store cannot invalidate this cache: an entry is used for at most
// principalTTL after its read began, so such a change applies here within that. Tokens
// are not cached: a revoked token is refused at once, on every node, because its record
// is read on every call that shows it.
type principals struct {
	mu     sync.Mutex
	gen    uint64
	byName map[string]kept[*Principal]
	byUID  map[int]kept[string]
}

// principalTTL is how long a kept principal or uid mapping is used.
const principalTTL = 3 * time.Second

// kept is a cached value and when the read that gave it began.
type kept[T any] struct {
	v  T
	at time.Time
}

// fresh says whether an entry read at at may still be used at now.
func fresh(at, now time.Time) bool {
	return !now.Before(at) && now.Sub(at) < principalTTL
}

// generation is the count of changes so far, noted before a read from the store.
func (c *principals) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// invalidate forgets everything: an identity or a role changed.
func (c *principals) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.byName, c.byUID = nil, nil
}

// get returns a copy of name's principal, if kept and fresh at now; the caller may set
// its TokenID.
func (c *principals) get(name string, now time.Time) *Principal {
	c.mu.Lock()
	e, ok := c.byName[name]
	c.mu.Unlock()
	if !ok || !fresh(e.at, now) {
		return nil
	}
	cp := *e.v
	cp.Roles = slices.Clone(e.v.Roles)
	return &cp
}

// put keeps p, whose read began at at while the generation was gen; a change since
// then drops it.
func (c *principals) put(gen uint64, at time.Time, p *Principal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.byName == nil {
		c.byName = map[string]kept[*Principal]{}
	}
	cp := *p
	cp.Roles, cp.TokenID = slices.Clone(p.Roles), ""
	c.byName[p.Identity] = kept[*Principal]{&cp, at}
}

func (c *principals) uid(uid int, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byUID[uid]
	if !ok || !fresh(e.at, now) {
		return "", false
	}
	return e.v, true
}

func (c *principals) putUID(gen uint64, at time.Time, uid int, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.byUID == nil {
		c.byUID = map[int]kept[string]{}
	}
	c.byUID[uid] = kept[string]{name, at}
}

// cachedPrincipal is principal, from the cache when it can be.
func (s *Service) cachedPrincipal(ctx context.Context, name string) (*Principal, error) {
	at := s.now()
	if p := s.cache.get(name, at); p != nil {
		return p, nil
	}
	gen := s.cache.generation()
	p, err := s.principalAs(ctx, name, nil)
	if err != nil {
		return nil, err
	}
	s.cache.put(gen, at, p)
	return p, nil
}

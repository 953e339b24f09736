package auth

import (
	"context"
	"slices"
	"sync"
)

// principals keeps the principal of each identity and the identity of each mapped local
// uid, so a request does not read the identity, every custom role and (for a uid not in
// the configuration) every identity from the store again. Every change to identities or
// roles goes through this package and calls invalidate once it is stored; an entry is
// kept only when no change happened while it was read, so a principal read before a
// change is never kept after it. A removed identity or a role taken away is refused on
// the very next call. Tokens are not cached: a revoked token is refused at once because
// its record is read on every call that shows it.
type principals struct {
	mu     sync.Mutex
	gen    uint64
	byName map[string]*Principal
	byUID  map[int]string
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

// get returns a copy of name's principal, if kept; the caller may set its TokenID.
func (c *principals) get(name string) *Principal {
	c.mu.Lock()
	p := c.byName[name]
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	cp := *p
	cp.Roles = slices.Clone(p.Roles)
	return &cp
}

// put keeps p, read while the generation was gen; a change since then drops it.
func (c *principals) put(gen uint64, p *Principal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.byName == nil {
		c.byName = map[string]*Principal{}
	}
	cp := *p
	cp.Roles, cp.TokenID = slices.Clone(p.Roles), ""
	c.byName[p.Identity] = &cp
}

func (c *principals) uid(uid int) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name, ok := c.byUID[uid]
	return name, ok
}

func (c *principals) putUID(gen uint64, uid int, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.byUID == nil {
		c.byUID = map[int]string{}
	}
	c.byUID[uid] = name
}

// cachedPrincipal is principal, from the cache when it can be.
func (s *Service) cachedPrincipal(ctx context.Context, name string) (*Principal, error) {
	if p := s.cache.get(name); p != nil {
		return p, nil
	}
	gen := s.cache.generation()
	p, err := s.principalAs(ctx, name, nil)
	if err != nil {
		return nil, err
	}
	s.cache.put(gen, p)
	return p, nil
}

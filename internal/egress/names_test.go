package egress

import (
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestResolvedNames(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := &ResolvedNames{MinTTL: time.Minute, PerSandbox: 3, now: func() time.Time { return now }}
	a1, a2 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	r.Add("sb", "a.example", a1, 10*time.Second) // lasts MinTTL
	r.Add("sb", "b.example", a1, time.Hour)
	r.Add("sb", "c.example", a2, 5*time.Minute)
	r.Add("other", "z.example", a1, time.Hour)

	if got := r.Names("sb", a1); !slices.Equal(got, []string{"a.example", "b.example"}) {
		t.Errorf("Names(sb, %s) = %v", a1, got)
	}
	if got := r.Names("sb", netip.MustParseAddr("::ffff:192.0.2.1")); !slices.Equal(got, []string{"a.example", "b.example"}) {
		t.Errorf("Names of the IPv4-mapped form = %v, want the IPv4 address's", got)
	}
	if got := r.Names("nobody", a1); len(got) != 0 {
		t.Errorf("Names of an unknown sandbox = %v", got)
	}

	now = now.Add(2 * time.Minute) // a.example has expired
	if got := r.Names("sb", a1); !slices.Equal(got, []string{"b.example"}) {
		t.Errorf("after 2 minutes Names = %v, want only b.example", got)
	}
	// Full (3 kept, one expired): adding drops the expired one first.
	r.Add("sb", "d.example", a2, time.Hour)
	if got := r.Names("sb", a2); !slices.Equal(got, []string{"c.example", "d.example"}) {
		t.Errorf("Names(sb, %s) = %v", a2, got)
	}
	// Full with none expired: the one that expires first (c.example) goes.
	r.Add("sb", "e.example", a2, time.Hour)
	if got := r.Names("sb", a2); !slices.Equal(got, []string{"d.example", "e.example"}) {
		t.Errorf("after eviction Names(sb, %s) = %v, want d and e", a2, got)
	}
	// A later answer with a shorter TTL does not shorten a mapping.
	r.Add("sb", "b.example", a1, 0)
	now = now.Add(30 * time.Minute)
	if got := r.Names("sb", a1); !slices.Equal(got, []string{"b.example"}) {
		t.Errorf("b.example after a shorter answer = %v", got)
	}
	r.Forget("sb")
	if got := r.Names("sb", a1); len(got) != 0 {
		t.Errorf("after Forget Names = %v", got)
	}
	if got := r.Names("other", a1); !slices.Equal(got, []string{"z.example"}) {
		t.Errorf("Forget of sb dropped another sandbox's names: %v", got)
	}
}

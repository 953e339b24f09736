package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store"
)

// seedSandboxes stores n suspended sandboxes of owner, each a record like a default
// sandbox's, in a fresh database on disk.
func seedSandboxes(b *testing.B, n int, owner string) *Store {
	b.Helper()
	st, err := Open(filepath.Join(b.TempDir(), "airlock.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		t := t0.Add(time.Duration(i) * time.Second)
		sb := &store.Sandbox{
			ID: fmt.Sprintf("sb_%016d", i), Name: fmt.Sprintf("box-%d", i), Owner: owner, State: "suspended",
			Image: "host", ImageDigest: "sha256:0f9263e7a5856f5a19cec58457cd1d4b259ec4d0905ef0d7812a851c53e5ec2b", Runtime: "runc",
			Limits:     store.Limits{CPU: 1, Memory: 1 << 30, PIDs: 1024, OpenFiles: 20000, Disk: 10 << 30},
			Labels:     map[string]string{"team": "a", "job": fmt.Sprint(i % 50)},
			Generation: 1, UIDBase: uint32(1<<20 + i<<16), CreatedAt: t, LastActivity: t, SuspendedAt: t,
			ExpiresAt: t.Add(8 * time.Hour), IdleSuspend: 10 * time.Minute, TTL: 7 * 24 * time.Hour,
			Network: store.Network{Mode: "baseline"},
		}
		if err := st.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
	return st
}

// BenchmarkListSuspended lists 20,000 suspended sandboxes of one owner, as `airlock ls`
// asks the store for them (target: the whole ls under 100 ms). BenchmarkGetByName finds
// one sandbox by name among them, as every exec does.
//
//	go test -run '^$' -bench 'ListSuspended|GetByName' ./internal/store/sqlite/
func BenchmarkListSuspended(b *testing.B) {
	st := seedSandboxes(b, 20_000, "alice")
	ctx := context.Background()
	f := store.SandboxFilter{Owner: "alice", States: []store.State{"suspended"}}
	for b.Loop() {
		list, err := st.ListSandboxes(ctx, f)
		if err != nil {
			b.Fatal(err)
		}
		if len(list) != 20_000 {
			b.Fatalf("listed %d sandboxes, want 20000", len(list))
		}
	}
}

// BenchmarkListPage lists one page of 1000 from the middle of the same 20,000, as
// `GET /v1/sandboxes?limit=1000&after=…` does; BenchmarkListPaged reads all 20,000
// through such pages.
//
//	go test -run '^$' -bench 'ListPage' ./internal/store/sqlite/
func BenchmarkListPage(b *testing.B) {
	st := seedSandboxes(b, 20_000, "alice")
	ctx := context.Background()
	mid, err := st.GetSandbox(ctx, fmt.Sprintf("sb_%016d", 10_000))
	if err != nil {
		b.Fatal(err)
	}
	f := store.SandboxFilter{Owner: "alice", States: []store.State{"suspended"}, After: store.PlaceOf(mid), Limit: 1000}
	for b.Loop() {
		list, err := st.ListSandboxes(ctx, f)
		if err != nil {
			b.Fatal(err)
		}
		if len(list) != 1000 || list[0].ID != fmt.Sprintf("sb_%016d", 10_001) {
			b.Fatalf("listed %d sandboxes from %s, want 1000 from the one after the place", len(list), list[0].ID)
		}
	}
}

func BenchmarkListPaged(b *testing.B) {
	st := seedSandboxes(b, 20_000, "alice")
	ctx := context.Background()
	var ops int
	cpu0 := processCPU(b)
	defer func() {
		// on a shared machine the CPU time moves less with the load than the wall time
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(time.Millisecond)/float64(ops), "cpu-ms/op")
	}()
	for b.Loop() {
		ops++
		f := store.SandboxFilter{Owner: "alice", States: []store.State{"suspended"}, Limit: 1000}
		n := 0
		for {
			list, err := st.ListSandboxes(ctx, f)
			if err != nil {
				b.Fatal(err)
			}
			n += len(list)
			if len(list) < f.Limit {
				break
			}
			f.After = store.PlaceOf(list[len(list)-1])
		}
		if n != 20_000 {
			b.Fatalf("listed %d sandboxes, want 20000", n)
		}
	}
}

func BenchmarkGetByName(b *testing.B) {
	st := seedSandboxes(b, 20_000, "alice")
	ctx := context.Background()
	i := 0
	for b.Loop() {
		name := fmt.Sprintf("box-%d", i%20_000)
		if _, err := st.GetSandboxByName(ctx, "alice", name); err != nil {
			b.Fatal(err)
		}
		i += 7919
	}
}

// A list, an owner's or everyone's, whole or a page after a place, walks an index in
// list order: no sort of every matching row.
func TestListSandboxesNeedsNoSort(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	after := &store.ListPlace{CreatedAt: time.Now(), ID: "sb_x"}
	for _, f := range []store.SandboxFilter{
		{Owner: "alice", States: []store.State{"suspended", "running"}},
		{Owner: "alice", States: []store.State{"suspended"}, After: after, Limit: 1000},
		{After: after, Limit: 1000},
		{Owner: "alice", States: []store.State{"running"}, After: after, Limit: 101, Desc: true},
	} {
		if p := queryPlan(t, st, f); strings.Contains(p, "TEMP B-TREE") {
			t.Errorf("list %+v sorts its rows: %s", f, p)
		}
	}
}

func queryPlan(t *testing.T, st *Store, f store.SandboxFilter) string {
	q, args := listQuery(f)
	rows, err := st.r.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}

// processCPU is the user and system CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkListShortPage lists 16 of 100 records, as a pool claim reads its pool's
// members (and a create its owner's live sandboxes): the query's text costs more than
// its rows, so it is kept prepared.
//
//	go test -run '^$' -bench 'ListShortPage' ./internal/store/sqlite/
func BenchmarkListShortPage(b *testing.B) {
	st := seedSandboxes(b, 100, "pool:warm")
	ctx := context.Background()
	f := store.SandboxFilter{Owner: "pool:warm", States: []store.State{"suspended"}, Limit: 16}
	for b.Loop() {
		list, err := st.ListSandboxes(ctx, f)
		if err != nil {
			b.Fatal(err)
		}
		if len(list) != 16 {
			b.Fatalf("listed %d sandboxes, want 16", len(list))
		}
	}
}

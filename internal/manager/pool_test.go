package manager

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	fakenet "github.com/airlockhq/airlock/internal/netattach/fake"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store"
)

// fillPool sets a pool of the node's defaults and starts its members, one per tend.
func fillPool(t *testing.T, m *Manager, name string, size int) []string {
	t.Helper()
	return fillPoolWith(t, m, PoolRequest{Name: name, Size: size})
}

func fillPoolWith(t *testing.T, m *Manager, req PoolRequest) []string {
	t.Helper()
	ctx := context.Background()
	name, size := req.Name, req.Size
	if _, err := m.SetPool(ctx, local, req); err != nil {
		t.Fatal(err)
	}
	for range size {
		m.tendPools(ctx)
	}
	return memberIDs(t, m, name)
}

func memberIDs(t *testing.T, m *Manager, name string) []string {
	t.Helper()
	list, err := m.store.ListSandboxes(context.Background(), store.SandboxFilter{Owner: store.PoolOwner(name), States: []store.State{Running}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.ID)
	}
	return ids
}

func poolInfo(t *testing.T, m *Manager, name string) PoolInfo {
	t.Helper()
	list, err := m.Pools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("pool %q is not listed", name)
	return PoolInfo{}
}

func TestPoolClaimHandsOverIdentity(t *testing.T) {
	m, fd, _ := newTestManager(t)
	net := fakenet.New()
	m.SetNetwork(net)
	ctx := context.Background()
	members := fillPoolWith(t, m, PoolRequest{Name: "warm", Size: 2, Network: "allowlist"})
	if len(members) != 2 {
		t.Fatalf("members after two tends = %v, want 2", members)
	}
	if list, _ := m.List(ctx, store.SandboxFilter{Owner: "local"}); len(list) != 0 {
		t.Fatalf("the owner's list shows %d sandboxes before any create; members must be hidden", len(list))
	}
	_, sb, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "a", Labels: map[string]string{"team": "x"}, Env: map[string]string{"GREETING": "hi"}, Role: "developer",
		Network: &store.Network{Mode: "allowlist", Allow: []string{"example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(members, sb.ID) {
		t.Fatalf("create with the node's defaults got %s, not a member of %v", sb.ID, members)
	}
	got, err := m.Resolve(ctx, "alice", "a")
	if err != nil {
		t.Fatalf("the claimed sandbox is not alice's: %v", err)
	}
	if got.ID != sb.ID || got.Owner != "alice" || got.Labels["team"] != "x" || got.Role != "developer" || got.State != Running {
		t.Errorf("claimed record = %+v; want alice's sandbox a, running, with its labels and role", got)
	}
	if att, _ := net.Sandbox(sb.ID); att.Owner != "alice" || att.Role != "developer" || len(att.Policy.Rules) != 1 {
		t.Errorf("network attachment of the claimed sandbox = %+v; want alice's, role developer, with the create's allow rule", att)
	}
	if h := fd.Hostname(sb.ID); h != "a" {
		t.Errorf("claimed container's host name = %q, want a", h)
	}
	env, err := m.ProcessEnv(ctx, got, []string{"X=1"})
	if err != nil || !slices.Contains(env, "GREETING=hi") || !slices.Contains(env, "X=1") {
		t.Errorf("process env of the claimed sandbox = %v (%v); want GREETING=hi and X=1", env, err)
	}
	if env, _ := m.ProcessEnv(ctx, got, []string{"GREETING=bye"}); slices.Contains(env, "GREETING=hi") || !slices.Contains(env, "GREETING=bye") {
		t.Errorf("process env with the caller's GREETING = %v; the caller's must win over the sandbox's", env)
	}
	if left := memberIDs(t, m, "warm"); len(left) != 1 || left[0] == sb.ID {
		t.Errorf("members after a claim = %v; want the one other", left)
	}
	// Limits other than the pool's are a cold create, and count no miss.
	_, cold, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "b", Limits: store.Limits{CPU: 0.5}, Network: &store.Network{Mode: "allowlist"}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(members, cold.ID) {
		t.Errorf("a create with other limits claimed member %s", cold.ID)
	}
	// So is another network mode.
	_, other, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(members, other.ID) {
		t.Errorf("a create in network mode baseline claimed member %s of an allowlist pool", other.ID)
	}
	if info := poolInfo(t, m, "warm"); info.Hits != 1 || info.Misses != 0 || info.Ready != 1 || info.Size != 2 {
		t.Errorf("pool = %+v; want size 2, ready 1, 1 hit, 0 misses", info)
	}
}

func TestPoolConcurrentClaimsTakeDistinctMembers(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 3)
	const n = 8
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, sb, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: fmt.Sprintf("c%d", i)})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = sb.ID
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	claimed := 0
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("two creates got sandbox %s", id)
		}
		seen[id] = true
		if slices.Contains(members, id) {
			claimed++
		}
	}
	if claimed != 3 {
		t.Errorf("%d creates claimed a member, want all 3 members claimed once", claimed)
	}
	if info := poolInfo(t, m, "warm"); info.Hits != 3 || info.Misses != n-3 {
		t.Errorf("pool = %+v; want 3 hits, %d misses", info, n-3)
	}
}

func TestPoolNeverHandsOutAUsedMember(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 1)
	m.touch(members[0]) // a call reached its agent
	_, sb, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID == members[0] {
		t.Fatalf("create claimed a member that was used")
	}
	m.tendPools(ctx)
	if err := m.WaitCleanups(ctx); err != nil { // the retired member's record goes with its cleanup
		t.Fatal(err)
	}
	if _, err := m.store.GetSandbox(ctx, members[0]); err == nil {
		t.Errorf("a used member is still kept after a tend")
	}
}

func TestPoolRefillIsBounded(t *testing.T) {
	m, _, _ := newTestManager(t)
	ctx := context.Background()
	if _, err := m.SetPool(ctx, local, PoolRequest{Name: "warm", Size: 5}); err != nil {
		t.Fatal(err)
	}
	done := m.coldCreate() // a caller's create under way
	m.tendPools(ctx)
	if got := len(memberIDs(t, m, "warm")); got != 0 {
		t.Errorf("a tend during a caller's create started %d members, want 0", got)
	}
	done()
	if more := m.tendPools(ctx); !more {
		t.Errorf("tend says the pool is full after 1 of 5")
	}
	if got := len(memberIDs(t, m, "warm")); got != 1 {
		t.Errorf("one tend started %d members, want 1", got)
	}
	if _, err := m.SetPool(ctx, local, PoolRequest{Name: "big", Size: MaxPoolSize + 1}); err == nil {
		t.Errorf("a pool past the size cap was set")
	}
}

func TestPoolMembersSurviveRestart(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	keep := fillPool(t, m, "keep", 1)
	gone := fillPool(t, m, "gone", 1)
	if err := st.DeletePool(ctx, "gone"); err != nil { // removed while the daemon was down
		t.Fatal(err)
	}
	m.Close()

	m2 := New(DefaultConfig(), st, fd, m.images, nil)
	t.Cleanup(func() { m2.Close() })
	if err := m2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.StartPools(ctx); err != nil {
		t.Fatal(err)
	}
	// The refill loop's first look goes through every sandbox.
	deadline := time.Now().Add(10 * time.Second)
	for _, err := st.GetSandbox(ctx, gone[0]); err == nil && time.Now().Before(deadline); _, err = st.GetSandbox(ctx, gone[0]) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := st.GetSandbox(ctx, gone[0]); err == nil || fd.Running(gone[0]) {
		t.Errorf("the member of a removed pool survived the restart")
	}
	if !fd.Running(keep[0]) {
		t.Fatalf("the member of a kept pool is not running after the restart")
	}
	_, sb, err := m2.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != keep[0] {
		t.Errorf("create after restart got %s, want the reattached member %s", sb.ID, keep[0])
	}
}

func TestPoolRemoveTerminatesMembers(t *testing.T) {
	m, fd, _ := newTestManager(t)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 2)
	var bases []uint32
	for _, id := range members {
		sb, err := m.store.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, sb.UIDBase)
	}
	if err := m.DeletePool(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitCleanups(ctx); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	for i, b := range bases {
		if holder := m.slots[b]; holder != "" {
			t.Errorf("member %s's uid range is held by %q after pool rm; want it freed", members[i], holder)
		}
	}
	m.mu.Unlock()
	for _, id := range members {
		if fd.Running(id) {
			t.Errorf("member %s still runs after pool rm", id)
		}
		if _, err := m.store.GetSandbox(ctx, id); err == nil {
			t.Errorf("member %s still has a record after pool rm", id)
		}
	}
	if err := m.DeletePool(ctx, "warm"); err == nil {
		t.Errorf("removing a pool twice succeeded")
	}
}

func TestGCRetiresOrphanedMembers(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 1)
	if err := st.DeletePool(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	m.pools.mu.Lock()
	delete(m.pools.byName, "warm") // as a restart would find it
	m.pools.mu.Unlock()
	left, err := m.GC(ctx, true)
	if err != nil || len(left) != 1 || left[0].SandboxID != members[0] || !fd.Running(members[0]) {
		t.Fatalf("gc --dry-run = %+v (%v); want the orphaned member listed and kept", left, err)
	}
	if _, err := m.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if fd.Running(members[0]) {
		t.Errorf("gc left the orphaned member %s running", members[0])
	}
	if _, err := st.GetSandbox(ctx, members[0]); err == nil {
		t.Errorf("gc left the orphaned member's record")
	}
}

// TestPoolClaimIsAtomic: claims racing for one member, each from the same read of it,
// leave it to exactly one of them.
func TestPoolClaimIsAtomic(t *testing.T) {
	m, fd, st := newTestManager(t)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 1)
	mem, err := st.GetSandbox(ctx, members[0])
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	won := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			want := *mem
			want.Name, want.Owner = fmt.Sprintf("c%d", i), fmt.Sprintf("owner%d", i)
			op := &store.Operation{ID: fmt.Sprintf("op_c%d", i), Kind: "create", Owner: want.Owner, State: store.OpRunning}
			ok, err := m.claimMember(ctx, claim{pool: "warm", hn: fd, end: &endOp{op: op, newOp: true}}, mem, &want)
			if err != nil {
				t.Error(err)
			}
			won[i] = ok
		})
	}
	wg.Wait()
	winners := 0
	for _, w := range won {
		if w {
			winners++
		}
	}
	if winners != 1 {
		t.Errorf("%d of %d racing claims of one member succeeded, want exactly 1", winners, n)
	}
	// The losers left the winner's sandbox alone, its host name included.
	if i := slices.Index(won, true); i >= 0 {
		if h := fd.Hostname(mem.ID); h != fmt.Sprintf("c%d", i) {
			t.Errorf("the claimed member's host name = %q; want its winner's c%d", h, i)
		}
	}
}

// heldClaimStore holds the claim of a pool member for one sandbox name just after the
// member's record is stored under that name, until proceed is closed.
type heldClaimStore struct {
	store.Store
	name            string
	stored, proceed chan struct{}
}

func (s *heldClaimStore) UpdateSandbox(ctx context.Context, sb *store.Sandbox) error {
	err := s.Store.UpdateSandbox(ctx, sb)
	if err == nil && sb.Name == s.name {
		s.name = "" // once
		close(s.stored)
		<-s.proceed
	}
	return err
}

// TestPoolClaimCountsAgainstTheCapOnce: a claim whose member record is stored for its
// owner, but whose create has not answered yet, counts once against the owner's cap:
// the claim's reservation moves to the member's id. Counted twice, creates up to the
// cap sent at once were refused.
func TestPoolClaimCountsAgainstTheCapOnce(t *testing.T) {
	_, st := newManagerWith(t, DefaultConfig(), newFake(t))
	imgs, err := image.Open(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	held := &heldClaimStore{Store: st, name: "first", stored: make(chan struct{}), proceed: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.LiveCap = 2
	m := New(cfg, held, newFake(t), imgs, nil)
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	members := fillPool(t, m, "warm", 2)
	first := make(chan error, 1)
	go func() {
		_, _, err := m.Create(ctx, local, CreateRequest{Name: "first"})
		first <- err
	}()
	<-held.stored
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "second"})
	close(held.proceed)
	if err != nil {
		t.Fatalf("the second of two creates under a cap of 2, while the first's claim is stored: %v", err)
	}
	if !slices.Contains(members, sb.ID) {
		t.Errorf("the second create did not claim a member")
	}
	if err := <-first; err != nil {
		t.Fatalf("first create: %v", err)
	}
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "third"}); !errors.Is(err, errdefs.ErrQuotaExceeded) {
		t.Fatalf("a third create under a cap of 2: err = %v; want quota exceeded", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pending) != 0 {
		t.Errorf("creates in flight after all answered: %v", m.pending)
	}
}

// renameFails is the fake driver whose containers cannot take a new host name, so a
// claimed pool member cannot take its identity.
type renameFails struct{ *fake.Driver }

func (d renameFails) SetHostname(ctx context.Context, id, name string) error {
	return errors.New("sethostname: operation not permitted")
}

// TestPoolFailedClaimCleansTheMember: a member whose claim fails goes as a retired one
// does: its container, uid range and record are all removed, and the create is a cold
// one that leaves no other sandbox of the caller behind.
func TestPoolFailedClaimCleansTheMember(t *testing.T) {
	drv := renameFails{newFake(t)}
	m, st := newManagerWith(t, DefaultConfig(), drv)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 1)
	if len(members) != 1 {
		t.Fatalf("pool members = %v; want 1", members)
	}
	mem, err := st.GetSandbox(ctx, members[0])
	if err != nil {
		t.Fatal(err)
	}
	_, sb, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatalf("create after a failed claim: %v", err)
	}
	if sb.ID == mem.ID {
		t.Fatalf("the create took the member whose claim failed")
	}
	if err := m.WaitCleanups(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, _ := drv.List(ctx); slices.Contains(ids, mem.ID) {
		t.Errorf("the member whose claim failed still has its container (%v)", ids)
	}
	m.mu.Lock()
	holder := m.slots[mem.UIDBase]
	m.mu.Unlock()
	if holder == mem.ID {
		t.Errorf("the member whose claim failed still holds its uid range")
	}
	if _, err := st.GetSandbox(ctx, mem.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the member whose claim failed still has a record (%v)", err)
	}
	all, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice"})
	if err != nil || len(all) != 1 || all[0].ID != sb.ID {
		t.Errorf("alice's sandboxes = %d (%v); want only the cold one, %s", len(all), err, sb.ID)
	}
}

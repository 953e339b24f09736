package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestVolumeQuotaAndAudit: an owner's volumes (snapshots and grows included) stay within
// its volume quota, a refusal says so and changes nothing, bad sizes are refused, and
// every volume call is in the audit log with its identity.
func TestVolumeQuotaAndAudit(t *testing.T) {
	testenv.RequireVolumes(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) { c.VolumeQuota = 40 << 20 }})
	ctx := context.Background()
	c := n.Client
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "a", Size: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "b", Size: 32 << 20})
	if e, ok := err.(*client.Error); !ok || e.Code != "quota_exceeded" {
		t.Fatalf("a volume past the quota: %v; want quota_exceeded", err)
	}
	_, err = c.ResizeVolume(ctx, "a", 48<<20)
	if e, ok := err.(*client.Error); !ok || e.Code != "quota_exceeded" {
		t.Fatalf("a grow past the quota: %v; want quota_exceeded", err)
	}
	if _, err := c.SnapshotVolume(ctx, "a"); err != nil { // 32 MiB of 40
		t.Fatal(err)
	}
	_, err = c.SnapshotVolume(ctx, "a")
	if e, ok := err.(*client.Error); !ok || e.Code != "quota_exceeded" {
		t.Fatalf("a snapshot past the quota: %v; want quota_exceeded", err)
	}
	for _, bad := range []api.CreateVolumeRequest{{Name: "Bad_Name", Size: 16 << 20}, {Name: "c", Size: 1}, {Name: "c", Size: 1 << 60}} {
		_, err := c.CreateVolume(ctx, bad)
		if e, ok := err.(*client.Error); !ok || e.Code != "invalid_argument" {
			t.Errorf("create %+v: %v; want invalid_argument", bad, err)
		}
	}
	if list, _ := c.Volumes(ctx, ""); len(list) != 1 || list[0].Size != 16<<20 {
		t.Errorf("after the refusals the volumes are %+v; want a alone, 16 MiB", list)
	}
	recs, err := c.AuditLog(ctx, client.AuditFilter{Action: "POST /v1/volumes"})
	if err != nil || len(recs) != 5 {
		t.Fatalf("audit records of volume creates: %d, %v; want 5", len(recs), err)
	}
	if !strings.Contains(string(recs[0].Record), `"identity":"local"`) {
		t.Errorf("the audit record does not name the caller: %s", recs[0].Record)
	}
	snaps, _ := c.Volumes(ctx, "snapshot")
	for _, s := range snaps {
		c.DeleteVolume(ctx, s.ID)
	}
	if err := c.DeleteVolume(ctx, "a"); err != nil {
		t.Fatal(err)
	}
}

// TestVolumeWriterLeaseUnderConcurrentAttaches: of several suspended sandboxes that ask
// at once to write one volume, exactly one gets it; the others are refused naming the
// holder, and read-only attaches still go through.
func TestVolumeWriterLeaseUnderConcurrentAttaches(t *testing.T) {
	testenv.RequireVolumes(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	ctx := context.Background()
	c := n.Client
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "shared", Size: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	const k = 6
	for i := range k {
		name := "s" + string(rune('a'+i))
		if _, err := c.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Suspend(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	won := 0
	for _, err := range atOnce(k, func(i int) error {
		_, err := c.AttachVolume(ctx, "shared", api.AttachVolumeRequest{Sandbox: "s" + string(rune('a'+i)), Path: "/data"})
		return err
	}) {
		if err == nil {
			won++
			continue
		}
		if e, ok := err.(*client.Error); !ok || e.Code != "failed_precondition" || !strings.Contains(e.Message, "writer lease") {
			t.Errorf("a losing attach: %v; want failed_precondition naming the writer lease", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d sandboxes got the writer lease; want exactly 1", won)
	}
	v, err := c.GetVolume(ctx, "shared")
	if err != nil || len(v.Attachments) != 1 || v.Attachments[0].ReadOnly {
		t.Fatalf("the volume after the race: %+v, %v; want one writer", v, err)
	}
	writer := v.Attachments[0].Sandbox
	for i := range k {
		name := "s" + string(rune('a'+i))
		if sb, _ := c.Get(ctx, name); sb != nil && sb.ID != writer {
			if _, err := c.AttachVolume(ctx, "shared", api.AttachVolumeRequest{Sandbox: name, Path: "/ro", ReadOnly: true}); err != nil {
				t.Errorf("a read-only attach beside the writer: %v", err)
			}
		}
	}
	if v, _ := c.GetVolume(ctx, "shared"); v == nil || len(v.Attachments) != k {
		t.Errorf("after the readers attached: %+v; want %d attachments", v, k)
	}
}

// TestVolumeCreateSkipsThePool: a create that attaches a volume is never served by a
// warm pool's member (started without it): it is made cold, with its volume.
func TestVolumeCreateSkipsThePool(t *testing.T) {
	testenv.RequireVolumes(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	ctx := context.Background()
	c := n.Client
	if _, err := c.SetPool(ctx, "warm", api.PoolRequest{Size: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeletePool(context.Background(), "warm") })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if pools, _ := c.Pools(ctx); len(pools) == 1 && pools[0].Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool has no ready member after 30s")
		}
	}
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", Size: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Create(ctx, api.CreateSandboxRequest{Name: "w", Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Sandbox.Volumes; len(got) != 1 || got[0].Name != "data" {
		t.Fatalf("the create's sandbox has volumes %+v; want data", got)
	}
	if pools, _ := c.Pools(ctx); len(pools) != 1 || pools[0].Hits != 0 {
		t.Errorf("the pool after a create with a volume: %+v; want no hit", pools)
	}
}

// TestVolumeForkGetsOnlyWhatItAsks: a fork gets none of its source's volumes; with
// volumes it gets those, and the writer lease holds across the two (the source keeps
// its volume's; the fork may read it).
func TestVolumeForkGetsOnlyWhatItAsks(t *testing.T) {
	testenv.RequireVolumes(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	ctx := context.Background()
	c := n.Client
	if _, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", Size: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, api.CreateSandboxRequest{Name: "src", Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}}); err != nil {
		t.Fatal(err)
	}
	plain, err := c.Fork(ctx, "src", api.ForkRequest{Name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Sandbox.Volumes) != 0 {
		t.Errorf("a fork without volumes has %+v", plain.Sandbox.Volumes)
	}
	_, err = c.Fork(ctx, "src", api.ForkRequest{Name: "writer", Volumes: []api.VolumeMount{{Name: "data", Path: "/data"}}})
	if e, ok := err.(*client.Error); !ok || e.Code != "failed_precondition" {
		t.Errorf("a fork that writes the source's volume: %v; want failed_precondition (the writer lease)", err)
	}
	reader, err := c.Fork(ctx, "src", api.ForkRequest{Name: "reader", Volumes: []api.VolumeMount{{Name: "data", Path: "/data", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if v := reader.Sandbox.Volumes; len(v) != 1 || v[0].Name != "data" || !v[0].ReadOnly {
		t.Errorf("a fork that reads the volume has %+v; want data read-only", v)
	}
}

// TestVolumesOutOfReachFromInside: code inside a sandbox cannot attach its owner's
// volumes to a sandbox it creates or forks (it would read and write them through that
// sandbox): the request is refused and makes nothing, and the volume has no attachment.
func TestVolumesOutOfReachFromInside(t *testing.T) {
	testenv.RequireVolumes(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{})
	ctx := context.Background()
	if _, err := n.Client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "private", Size: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	defer n.Client.DeleteVolume(ctx, "private")
	a := createSandbox(t, n, "inside")
	token, err := n.Auth.SessionToken(ctx, "local", "", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, string) {
		t.Helper()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		n.Server.ServeFromSandbox(w, r, a.ID)
		return w.Code, w.Body.String()
	}
	vols := `"volumes":[{"name":"private","path":"/data","read_only":true}]`
	for _, c := range []struct{ what, path, body string }{
		{"create", "/v1/sandboxes", `{"name":"child",` + vols + `}`},
		{"fork", "/v1/sandboxes/inside/fork", `{"name":"forked",` + vols + `}`},
	} {
		code, body := call("POST", c.path, c.body)
		if code != 403 || !strings.Contains(body, "volume") {
			t.Errorf("a %s with a volume from inside: HTTP %d (%s); want 403 saying volumes are attached from outside", c.what, code, strings.TrimSpace(body))
		}
	}
	for _, name := range []string{"child", "forked"} {
		if sb, err := n.Client.Get(ctx, name); err == nil {
			t.Errorf("a refused request made sandbox %s", sb.ID)
		}
	}
	if v, err := n.Client.GetVolume(ctx, "private"); err != nil || len(v.Attachments) != 0 {
		t.Errorf("the volume after the refused requests: %+v, %v; want no attachment", v, err)
	}
}

// TestVolumeQuotaHoldsUnderConcurrentCreates: creates that race each other stay within
// the owner's quota together, as they would one after the other.
func TestVolumeQuotaHoldsUnderConcurrentCreates(t *testing.T) {
	testenv.RequireVolumes(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) { c.VolumeQuota = 40 << 20 }})
	ctx := context.Background()
	c := n.Client
	const k = 5
	made := 0
	for _, err := range atOnce(k, func(i int) error {
		_, err := c.CreateVolume(ctx, api.CreateVolumeRequest{Name: "v" + string(rune('a'+i)), Size: 16 << 20})
		return err
	}) {
		if err == nil {
			made++
		} else if e, ok := err.(*client.Error); !ok || e.Code != "quota_exceeded" {
			t.Errorf("a create past the quota: %v; want quota_exceeded", err)
		}
	}
	list, err := c.Volumes(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		defer c.DeleteVolume(ctx, v.Name)
	}
	if made != 2 || len(list) != 2 {
		t.Errorf("%d of %d concurrent 16 MiB creates went through (%d volumes kept) under a 40 MiB quota; want 2", made, k, len(list))
	}
}

// atOnce runs call(0) … call(k-1) at the same time and returns their errors.
func atOnce(k int, call func(i int) error) []error {
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = call(i)
		}()
	}
	wg.Wait()
	return errs
}

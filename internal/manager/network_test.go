package manager

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	fakenet "github.com/airlockhq/airlock/internal/netattach/fake"
	"github.com/airlockhq/airlock/internal/store"
)

// TestNetworkAttachAndPolicyChange: a sandbox starts attached to the node's network
// with its policy, and its processes get the attachment's variables; a policy change
// reaches the running sandbox's network at once, except a move to mode none (which
// waits for the next start) or a policy refused as invalid; terminating detaches.
func TestNetworkAttachAndPolicyChange(t *testing.T) {
	m, _, _ := newTestManager(t)
	net := fakenet.New()
	m.SetNetwork(net)
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "n", Network: &NetworkPolicy{Allow: []string{"example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := net.Sandbox(sb.ID)
	if !ok || got.Attaches != 1 || got.Policy.Mode != egress.ModeAllowlist || len(got.Policy.Rules) != 1 ||
		!strings.Contains(got.Policy.Rules[0].String(), "example.com") {
		t.Fatalf("after create the network holds %+v (attached %v); want one attach with the allowlist of example.com", got, ok)
	}
	var out bytes.Buffer
	if _, err := m.Exec(ctx, "local", "n", ExecRequest{Argv: []string{"sh", "-c", `echo "$HTTPS_PROXY"`}}, &out, nil); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out.String()) != fakenet.ProxyURL {
		t.Errorf("a process sees HTTPS_PROXY=%q; want the attachment's %q", strings.TrimSpace(out.String()), fakenet.ProxyURL)
	}

	if _, _, err := m.SetNetworkPolicy(ctx, local, "n", NetworkPolicy{Allow: []string{"other.org"}}); err != nil {
		t.Fatal(err)
	}
	got, _ = net.Sandbox(sb.ID)
	if got.Policies != 1 || len(got.Policy.Rules) != 1 || !strings.Contains(got.Policy.Rules[0].String(), "other.org") {
		t.Errorf("after a policy change the network holds %+v; want the allowlist of other.org, set once", got)
	}
	if _, _, err := m.SetNetworkPolicy(ctx, local, "n", NetworkPolicy{Mode: "allowlist", Allow: []string{"*"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an invalid policy: %v, want invalid_argument", err)
	}
	if _, _, err := m.SetNetworkPolicy(ctx, local, "n", NetworkPolicy{Mode: string(egress.ModeNone)}); err != nil {
		t.Fatal(err)
	}
	if after, _ := net.Sandbox(sb.ID); after.Policies != 1 || after.Policy.Mode != egress.ModeAllowlist {
		t.Errorf("an invalid policy or a move to none changed the running network: %+v", after)
	}

	m.Terminate(ctx, local, "n")
	m.WaitCleanups(ctx)
	if ids, _ := net.List(); len(ids) != 0 {
		t.Errorf("terminate left the network of %v", ids)
	}
}

// TestNetworkAttachFailureRollsBack: a sandbox whose network cannot be made is not
// created, and leaves neither a record nor a network.
func TestNetworkAttachFailureRollsBack(t *testing.T) {
	m, fd, st := newTestManager(t)
	net := fakenet.New()
	m.SetNetwork(net)
	ctx := context.Background()
	net.FailNextAttach(errors.New("no veth for you"))
	if _, _, err := m.Create(ctx, local, CreateRequest{Name: "n"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("create with a failing network: %v, want unavailable", err)
	}
	if ids, _ := net.List(); len(ids) != 0 {
		t.Errorf("a failed create left the network of %v", ids)
	}
	if ids, _ := fd.List(ctx); len(ids) != 0 {
		t.Errorf("a failed create left containers %v", ids)
	}
	if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{}); len(list) != 0 {
		t.Errorf("a failed create left a record: %+v", list[0])
	}
}

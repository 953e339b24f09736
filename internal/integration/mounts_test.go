package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestMountTableNamesNothingOfTheHost reads every mount table a sandbox can see, with
// every kind of mount a sandbox can have (the agent binary, the network's files, the
// session token, a delivered secret file, a workspace), and finds in it neither the
// node's state directory, nor the directory of delivered secrets, nor the sandbox's id,
// owner or name.
func TestMountTableNamesNothingOfTheHost(t *testing.T) {
	netRequireHostNetns(t)
	n := testenv.NewNode(t, testenv.Options{Network: true})
	ws, err := os.MkdirTemp("", "ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	const name = "mnt-quiet-sandbox"
	sb := n.Create(t, api.CreateSandboxRequest{Name: name,
		Network: &api.NetworkPolicy{Mode: "deny_all"}, Workspace: &api.Workspace{Path: ws, Access: "rw"}})
	if _, err := n.Client.CreateSecret(background, api.CreateSecretRequest{Name: "mnt-file", Type: "token",
		AllowedHosts: []string{"api.example.test"}, Value: secretValue("pw-") + "\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.BindSecret(background, "mnt-file", api.BindSecretRequest{Sandbox: name,
		Target: "/etc/app/password", Delivery: "file"}); err != nil {
		t.Fatal(err)
	}
	// A file secret is delivered at the next start.
	if _, err := n.Client.Suspend(background, name); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Client.Resume(background, name); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, n, name, "cat /proc/self/mountinfo /proc/1/mountinfo /proc/self/mounts; cat /etc/app/password >/dev/null && echo secret-delivered")
	if !strings.Contains(out, "secret-delivered") || !strings.Contains(out, " /workspace ") ||
		!strings.Contains(out, " /run/airlock/session/token ") || !strings.Contains(out, " /.airlock/agent ") {
		t.Fatalf("the sandbox lacks a mount this test checks:\n%s", out)
	}
	secretsDir, _ := filepath.EvalSymlinks(n.SecretsDir)
	stateDir, _ := filepath.EvalSymlinks(n.Dir)
	for what, s := range map[string]string{
		"the state directory": stateDir, "its name as given": n.Dir, "the secrets directory": secretsDir,
		"the sandbox id": sb.ID, "the sandbox name": name, "the owner": "/local/",
		"the agent binary's directory": filepath.Dir(testenv.Binary(t)),
	} {
		if s == "" {
			t.Fatalf("%s is empty", what)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, s) {
				t.Errorf("the sandbox's mount table names %s (%q): %s", what, s, line)
			}
		}
	}
	if t.Failed() {
		t.Logf("mount table:\n%s", out)
	}
}

// TestHostMountsOfANetworkedSandbox lists the host's mounts a running sandbox with the
// default network keeps: its disk and its root overlay (its network namespace's mount
// goes once the container holds the namespace). Every
// container start reads and copies the host's whole mount table, so a mount more a
// sandbox is a little more time in every later create; the client files are on one
// tmpfs of the node's, the idmapped image layers are held by the overlay alone.
func TestHostMountsOfANetworkedSandbox(t *testing.T) {
	netRequireHostNetns(t)
	n := testenv.NewNode(t, testenv.Options{Network: true})
	sb := n.Create(t, api.CreateSandboxRequest{Name: "mounts"})
	var got []string
	for _, m := range testenv.MountsUnder(n.Dir) {
		if strings.Contains(m, sb.ID) {
			got = append(got, strings.ReplaceAll(strings.TrimPrefix(m, n.Dir+"/"), sb.ID, "ID"))
		}
	}
	slices.Sort(got)
	if want := []string{"sandboxes/ID/fs", "sandboxes/ID/rootfs"}; !slices.Equal(got, want) {
		t.Errorf("host mounts of a running sandbox: %v, want %v", got, want)
	}
	if out := mustRun(t, n, "mounts", "cat /etc/resolv.conf /run/airlock/session/token"); !strings.Contains(out, "nameserver ") || !strings.Contains(out, "al_session_") {
		t.Errorf("the sandbox's client files: %q", out)
	}
}

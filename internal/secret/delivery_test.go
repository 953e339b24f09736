package secret_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/secret"
	"golang.org/x/sys/unix"
)

// TestDeliveryFilesSurviveARestart: a file delivery is written on the tmpfs, given to
// the sandbox as a mount, and rewritten in place when the daemon restarts and finds the
// sandbox running, so that a revocation afterwards empties the very file the running
// sandbox has mounted. The proxy's substitution and the variables follow the bindings.
func TestDeliveryFilesSurviveARestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting the delivery tmpfs needs root")
	}
	s, _ := newService(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "secrets")
	d, err := secret.NewDelivery(s, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { secret.Unmount(dir) })
	for name, v := range map[string]string{"db": "pw-123456", "gh": "ghp_abcdefghijklmnopqrstuvwxyz"} {
		if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: name, Type: "token", AllowedHosts: []string{"api.example.com"}, Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(name, target, delivery string) {
		if _, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: name, Sandbox: "sb_1", Target: target, Delivery: delivery}); err != nil {
			t.Fatal(err)
		}
	}
	bind("db", "/etc/app/db", "file")
	if _, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "gh", Sandbox: "sb_1", Target: "GH_TOKEN", Headers: []string{"x-api-key"}}); err != nil {
		t.Fatal(err)
	}
	bind("db", "DB_PASSWORD", "env")

	// A sandbox without secrets leaves nothing in the delivery directory.
	if m, err := d.Start(ctx, "alice", "sb_none", uint32(os.Getuid())); err != nil || len(m) != 0 {
		t.Fatalf("Start of a sandbox with no bindings = %+v, %v", m, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sb_none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a sandbox with no bindings has a directory of delivered secrets: %v", err)
	}
	d.Stop("sb_none")
	mounts, err := d.Start(ctx, "alice", "sb_1", uint32(os.Getuid()))
	if err != nil || len(mounts) != 1 || mounts[0].Destination != "/etc/app/db" {
		t.Fatalf("Start = %+v, %v", mounts, err)
	}
	before, err := os.Stat(mounts[0].Source)
	if b, _ := os.ReadFile(mounts[0].Source); err != nil || string(b) != "pw-123456" {
		t.Fatalf("the delivered file holds %q, %v", b, err)
	}
	subs := d.Substitutions("sb_1")
	if len(subs) != 1 || subs[0].Secret != "gh" || subs[0].Placeholder != s.Placeholder("alice", "gh", "sb_1") ||
		strings.Join(subs[0].Headers, ",") != "X-Api-Key" {
		t.Fatalf("substitutions %+v", subs)
	}
	if v, err := subs[0].Value(); err != nil || string(v) != "ghp_abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("the substitution's value: %q, %v", v, err)
	}
	env, err := d.ExecEnv(ctx, "alice", "sb_1")
	if err != nil || strings.Join(env, " ") != "DB_PASSWORD=pw-123456 GH_TOKEN="+subs[0].Placeholder {
		t.Errorf("ExecEnv = %v, %v", env, err)
	}

	// Both secrets are rotated while the sandbox runs: its sandbox-scoped bindings keep
	// the versions it started with.
	for name, v := range map[string]string{"db": "pw-rotated", "gh": "ghp_rotatedrotatedrotatedrot"} {
		if _, err := s.Rotate(ctx, "alice", name, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}

	// The daemon restarts: a new delivery over the same tmpfs finds the sandbox running,
	// and delivers what the sandbox was given, not the newest versions.
	d2, err := secret.NewDelivery(s, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := d2.Resume(ctx, "alice", "sb_1", uint32(os.Getuid()))
	if err != nil || len(again) != 1 {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(again[0].Source); string(b) != "pw-123456" {
		t.Errorf("after the restart the delivered file holds %q, want the version the sandbox started with", b)
	}
	if subs := d2.Substitutions("sb_1"); len(subs) != 1 {
		t.Errorf("substitutions after the restart: %+v", subs)
	} else if v, err := subs[0].Value(); err != nil || string(v) != "ghp_abcdefghijklmnopqrstuvwxyz" {
		t.Errorf("after the restart the proxy substitutes %q (%v), want the version the sandbox started with", v, err)
	}
	if env, _ := d2.ExecEnv(ctx, "alice", "sb_1"); !strings.Contains(strings.Join(env, " "), "DB_PASSWORD=pw-123456") {
		t.Errorf("after the restart the executions' variables are %v, want the version the sandbox started with", env)
	}
	after, err := os.Stat(again[0].Source)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the restart replaced the delivered file (%v): a running sandbox's mount would keep the old one", err)
	}
	if _, err := s.Revoke(ctx, "alice", "db"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(again[0].Source); err != nil || fi.Size() != 0 || !os.SameFile(before, fi) {
		t.Errorf("after the revocation the mounted file: %v, %v; want it emptied in place", fi, err)
	}
	if env, _ := d2.ExecEnv(ctx, "alice", "sb_1"); strings.Contains(strings.Join(env, " "), "pw-123456") {
		t.Errorf("a revoked secret is still in the executions' variables: %v", env)
	}
	d2.Stop("sb_1")
	if _, err := os.Stat(again[0].Source); !os.IsNotExist(err) {
		t.Errorf("after Stop the file is still there: %v", err)
	}
	// A fresh start delivers the newest version.
	if _, err := d2.Start(ctx, "alice", "sb_1", uint32(os.Getuid())); err != nil {
		t.Fatal(err)
	}
	if subs := d2.Substitutions("sb_1"); len(subs) != 1 {
		t.Errorf("substitutions after a new start: %+v", subs)
	} else if v, _ := subs[0].Value(); string(v) != "ghp_rotatedrotatedrotatedrot" {
		t.Errorf("a new start substitutes %q, want the newest version", v)
	}
	d2.Stop("sb_1")
}

// TestDeliveryMountsItsOwnTmpfs: a secrets directory that is merely on a tmpfs (as one
// under /run is) gets a tmpfs of its own, private and sized; one that is already a
// tmpfs mount (an earlier start's) is kept.
func TestDeliveryMountsItsOwnTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	s, _ := newService(t)
	outer := t.TempDir()
	if err := unix.Mount("tmpfs", outer, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(outer, unix.MNT_DETACH) })
	dir := filepath.Join(outer, "sec rets") // a space: escaped in the mount table
	if _, err := secret.NewDelivery(s, dir, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { secret.Unmount(dir) })
	mounts := func() int {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		return strings.Count(string(b), " "+strings.ReplaceAll(dir, " ", `\040`)+" ")
	}
	if mounts() != 1 {
		t.Fatalf("%s on a tmpfs: %d mounts of its own, want 1", dir, mounts())
	}
	// The daemon starts again: the tmpfs there is kept, not mounted over.
	if _, err := secret.NewDelivery(s, dir, nil); err != nil {
		t.Fatal(err)
	}
	if mounts() != 1 {
		t.Errorf("after a second start %d mounts at %s, want the first kept alone", mounts(), dir)
	}
}

// TestDeliversValuesRemembersWhatWasGiven: a value delivered to a running sandbox may
// stay in its processes' memory after its binding is unbound or its secret revoked, so
// the sandbox still counts as holding values until its container stops; a container
// started afresh after the revocation got none.
func TestDeliversValuesRemembersWhatWasGiven(t *testing.T) {
	s, dir := newService(t)
	ctx := context.Background()
	d, err := secret.NewFakeDelivery(s, filepath.Join(dir, "delivered"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db", "api", "gh"} {
		if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: name, Type: "token", AllowedHosts: []string{"api.example.com"}, Value: []byte("value-of-" + name)}); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(name, sandbox, target, delivery string) {
		t.Helper()
		if _, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: name, Sandbox: sandbox, Target: target, Delivery: delivery}); err != nil {
			t.Fatal(err)
		}
	}
	values := func(sandbox string) bool {
		t.Helper()
		v, err := d.DeliversValues(ctx, "alice", sandbox)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	bind("db", "sb_1", "DB_PASSWORD", "env")
	bind("api", "sb_2", "/etc/api", "file")
	bind("gh", "sb_3", "GH_TOKEN", "proxy")
	for _, sb := range []string{"sb_1", "sb_2", "sb_3"} {
		if _, err := d.Start(ctx, "alice", sb, uint32(os.Getuid())); err != nil {
			t.Fatal(err)
		}
	}
	if !values("sb_1") || !values("sb_2") || values("sb_3") {
		t.Fatalf("before any change: sb_1 %v, sb_2 %v, sb_3 %v; want true, true, false", values("sb_1"), values("sb_2"), values("sb_3"))
	}
	if _, err := s.Revoke(ctx, "alice", "db"); err != nil {
		t.Fatal(err)
	}
	if !values("sb_1") {
		t.Error("an env delivery's secret revoked while the sandbox runs: DeliversValues is false; its processes may still hold the value")
	}
	if _, _, err := s.Unbind(ctx, "alice", "api", "sb_2", "/etc/api"); err != nil {
		t.Fatal(err)
	}
	if !values("sb_2") {
		t.Error("a file delivery unbound while the sandbox runs: DeliversValues is false; its processes may have read the value")
	}
	for _, sb := range []string{"sb_1", "sb_2"} {
		d.Stop(sb)
		if _, err := d.Start(ctx, "alice", sb, uint32(os.Getuid())); err != nil {
			t.Fatal(err)
		}
		if values(sb) {
			t.Errorf("%s started afresh after its value binding went: DeliversValues is true; want false", sb)
		}
	}
}

// TestDeliversValuesAcrossARestart: a daemon restarted while a sandbox runs still counts
// the values given to it before the restart, by a binding removed since.
func TestDeliversValuesAcrossARestart(t *testing.T) {
	s, dir := newService(t)
	ctx := context.Background()
	files := filepath.Join(dir, "delivered")
	d, err := secret.NewFakeDelivery(s, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"db", "gh"} {
		if _, err := s.Create(ctx, "alice", secret.CreateRequest{Name: name, Type: "token", AllowedHosts: []string{"api.example.com"}, Value: []byte("value-of-" + name)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "db", Sandbox: "sb_1", Target: "DB_PASSWORD", Delivery: "env"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Bind(ctx, "alice", secret.BindRequest{Secret: "gh", Sandbox: "sb_2", Target: "GH_TOKEN", Delivery: "proxy"}); err != nil {
		t.Fatal(err)
	}
	for _, sb := range []string{"sb_1", "sb_2"} {
		if _, err := d.Start(ctx, "alice", sb, uint32(os.Getuid())); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Unbind(ctx, "alice", "db", "sb_1", "DB_PASSWORD"); err != nil {
		t.Fatal(err)
	}
	restarted, err := secret.NewFakeDelivery(s, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	for sb, want := range map[string]bool{"sb_1": true, "sb_2": false} {
		if _, err := restarted.Resume(ctx, "alice", sb, uint32(os.Getuid())); err != nil {
			t.Fatal(err)
		}
		if got, err := restarted.DeliversValues(ctx, "alice", sb); err != nil || got != want {
			t.Errorf("%s after a restart: DeliversValues = %v, %v; want %v", sb, got, err, want)
		}
	}
}

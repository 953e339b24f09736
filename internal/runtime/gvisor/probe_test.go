package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A dynamically linked runsc is reported with the reason it fails here; a static binary
// that answers --version is reported usable.
func TestProbeSaysWhyADynamicRunscFails(t *testing.T) {
	ctx := context.Background()
	dyn, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to stand for a dynamically linked binary")
	}
	if static, err := isStatic(dyn); err != nil || static {
		t.Skipf("%s is not dynamically linked here (%v)", dyn, err)
	}
	c := probePath(ctx, dyn)
	if c.OK || !c.Optional || !strings.Contains(c.Degrades, "CGO_ENABLED=0") || !strings.Contains(c.Degrades, "/proc/self/exe") {
		t.Errorf("dynamic binary: %+v; want not OK, naming the exec failure and the fix", c)
	}

	bin := standIn(t)
	c = probePath(ctx, bin)
	if !c.OK || !strings.Contains(c.Detail, "runsc version test") || !strings.Contains(c.Detail, "static") {
		t.Errorf("static binary: %+v; want OK with its version", c)
	}
	if _, err := isStatic(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("isStatic of a missing file: no error")
	}
}

// standIn builds a static runsc stand-in: a Go program without cgo that prints a
// version, and appends a line to $PROBE_COUNT (when set) each time it runs.
func standIn(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte(`package main

import (
	"fmt"
	"os"
)

func main() {
	if p := os.Getenv("PROBE_COUNT"); p != "" {
		f, _ := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		f.WriteString("ran\n")
		f.Close()
	}
	fmt.Println("runsc version test")
}
`), 0o644)
	bin := filepath.Join(dir, "runsc")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build a static stand-in: %v\n%s", err, out)
	}
	return bin
}

// Probe runs runsc once per binary, not once per status call, and again when the
// binary changes.
func TestProbeRunsRunscOncePerBinary(t *testing.T) {
	bin := standIn(t)
	count := filepath.Join(t.TempDir(), "count")
	t.Setenv("PROBE_COUNT", count)
	t.Setenv("PATH", filepath.Dir(bin))
	runs := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "ran")
	}
	for range 3 {
		if c, ok := Probe(context.Background()); !ok || !c.OK {
			t.Fatalf("Probe = %+v, %v; want the stand-in found and usable", c, ok)
		}
	}
	if n := runs(); n != 1 {
		t.Errorf("runsc ran %d times for three probes of one binary, want 1", n)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(bin, later, later)
	Probe(context.Background())
	if n := runs(); n != 2 {
		t.Errorf("after the binary changed runsc ran %d times in all, want 2", n)
	}
}

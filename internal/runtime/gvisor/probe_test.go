package gvisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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

	// A static stand-in for runsc: a Go program built without cgo that prints a version.
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte("package main\nimport \"fmt\"\nfunc main() { fmt.Println(\"runsc version test\") }\n"), 0o644)
	bin := filepath.Join(dir, "runsc")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("cannot build a static stand-in: %v\n%s", err, out)
	}
	c = probePath(ctx, bin)
	if !c.OK || !strings.Contains(c.Detail, "runsc version test") || !strings.Contains(c.Detail, "static") {
		t.Errorf("static binary: %+v; want OK with its version", c)
	}
	if _, err := isStatic(filepath.Join(dir, "missing")); err == nil {
		t.Error("isStatic of a missing file: no error")
	}
}

package oci

import (
	goruntime "runtime"
	"testing"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestSeccompNativeArchOnly: the profile admits the native ABI only, so a syscall
// made through a 32-bit one is refused (and runc compiles one filter, not three).
func TestSeccompNativeArchOnly(t *testing.T) {
	native := map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}[goruntime.GOARCH]
	if native == "" {
		t.Skipf("no expectation for %s", goruntime.GOARCH)
	}
	prof, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Architectures) < 2 || prof.Architectures[0] != native {
		t.Fatalf("the default profile lists %v; this test expects the native %s first, then others", prof.Architectures, native)
	}
	if got := nativeArch(prof.Architectures); len(got) != 1 || got[0] != native {
		t.Fatalf("nativeArch(%v) = %v, want [%s]", prof.Architectures, got, native)
	}
	if got := nativeArch(nil); got != nil {
		t.Fatalf("nativeArch(nil) = %v", got)
	}
}

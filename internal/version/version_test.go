package version

import (
	"strings"
	"testing"
)

func TestStringPrefersTheBuildsVersion(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = ""
	if v := String(); v != "dev" && !strings.HasPrefix(v, "dev+") {
		t.Errorf("without a set version: %q, want dev or dev+REVISION", v)
	}
	Version = "v1.2.3-4-gabcdef"
	if v := String(); v != "v1.2.3-4-gabcdef" {
		t.Errorf("with a set version: %q", v)
	}
}

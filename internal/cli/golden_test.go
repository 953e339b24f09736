package cli

import (
	"regexp"
	"testing"
)

// TestGoldenOutputMore checks the answer of the other verbs, in table and JSON, on one
// scenario of the fake node. Values that change from run to run (ids, times, ages,
// digests, process ids, sizes of files the host writes) are normalised.
func TestGoldenOutputMore(t *testing.T) {
	n := newNode(t)
	var norm normalizer
	n.must(t, "create", "box", "--label", "team=x")
	n.must(t, "snapshot", "create", "box")
	norm.apply(n.must(t, "ls", "-a", "-o", "json"))
	norm.apply(n.must(t, "snapshot", "ls", "box", "-o", "json"))
	pid := regexp.MustCompile(`("pid": ?|\bpid |"duration_ms": ?)\d+`)
	for _, tc := range []struct {
		file string
		args []string
	}{
		{"exec.txt", []string{"exec", "box", "--", "echo", "hello"}},
		{"exec.json", []string{"exec", "box", "-o", "json", "--", "echo", "hello"}},
		{"snapshot-ls.txt", []string{"snapshot", "ls", "box"}},
		{"snapshot-ls.json", []string{"snapshot", "ls", "box", "-o", "json"}},
		{"network-get.txt", []string{"network", "get", "box"}},
		{"network-get.json", []string{"network", "get", "box", "-o", "json"}},
		{"port-ls.txt", []string{"port", "ls", "box"}},
		{"port-ls.json", []string{"port", "ls", "box", "-o", "json"}},
		{"egress-log.txt", []string{"egress", "log", "box"}},
		{"egress-log.json", []string{"egress", "log", "box", "-o", "json"}},
		{"whoami.txt", []string{"whoami"}},
		{"whoami.json", []string{"whoami", "-o", "json"}},
		{"role-ls.txt", []string{"role", "ls"}},
		{"role-ls.json", []string{"role", "ls", "-o", "json"}},
		{"secret-ls.txt", []string{"secret", "ls"}},
		{"secret-ls.json", []string{"secret", "ls", "-o", "json"}},
		{"risk.txt", []string{"risk", "--profile", "safe", "--", "rm -rf build"}},
		{"risk.json", []string{"risk", "--profile", "safe", "-o", "json", "--", "rm -rf build"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			out, errOut, err := n.run(bg, "", tc.args...)
			wantExit(t, err, 0)
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
			golden(t, tc.file, pid.ReplaceAllString(norm.apply(out), "${1}0"))
		})
	}
}

// Command precompile writes runsc's seccomp programs into its source before it is built
// (scripts/runsc.sh runs it from the root of a copy of the gVisor module; the leading
// underscore keeps it out of Airlock's own packages). gVisor's Bazel build does the same;
// a plain `go build` leaves runsc to build its filters at every sandbox start, which costs
// each start (a create, a restore) tens of milliseconds of CPU before it may go on.
//
// The sandbox's programs are kept for the systrap platform (the one Airlock runs) without
// device proxies; the gofer's all. A start whose options match none builds its filter as
// before.
package main

import (
	"fmt"
	"os"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

func main() {
	sandbox := func(name string) bool {
		return strings.Contains(name, `Platform="systrap"`) && !strings.Contains(name, "Proxy=true")
	}
	all := func(string) bool { return true }
	for _, t := range []struct {
		path string
		gen  func() ([]precompiledseccomp.Program, error)
		keep func(string) bool
	}{
		{"runsc/boot/filter/filter_precompiled.go", bootconfig.PrecompiledPrograms, sandbox},
		{"runsc/fsgofer/filter/filter_precompiled.go", goferconfig.PrecompiledPrograms, all},
	} {
		if err := write(t.path, t.gen, t.keep); err != nil {
			fmt.Fprintln(os.Stderr, "precompile:", err)
			os.Exit(1)
		}
	}
}

// write replaces the empty registerPrograms at the end of the file at path with one that
// registers the programs gen makes whose names keep accepts.
func write(path string, gen func() ([]precompiledseccomp.Program, error), keep func(string) bool) error {
	progs, err := gen()
	if err != nil {
		return err
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	const fn, off = "func registerPrograms() {", "PrecompilationDisabledAtBuildTime = true"
	head, _, ok := strings.Cut(string(src), fn)
	if !ok || !strings.Contains(head, off) {
		return fmt.Errorf("%s: not the file this was written for (no %q or %q)", path, fn, off)
	}
	var b strings.Builder
	b.WriteString(strings.Replace(head, off, "PrecompilationDisabledAtBuildTime = false", 1))
	b.WriteString(fn + "\n\tprograms := make(map[string]precompiledseccomp.Program)\n")
	n := 0
	for _, p := range progs {
		if keep(p.Name) {
			b.WriteString(p.Registration("\t", "precompiledseccomp", "programs"))
			n++
		}
	}
	b.WriteString("\tprecompiledPrograms = programs\n}\n")
	if n == 0 {
		return fmt.Errorf("%s: no program kept of %d", path, len(progs))
	}
	fmt.Printf("%s: %d of %d programs precompiled\n", path, n, len(progs))
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

// TestHelpServeListsServeFlags: help serve describes every flag main's serve parses
// (ServeFlags), in its synopsis and its flag list, and says how the socket authenticates.
func TestHelpServeListsServeFlags(t *testing.T) {
	var stdout, stderr bytes.Buffer
	wantExit(t, Run(bg, []string{"help", "serve"}, nil, &stdout, &stderr), 0)
	out := stdout.String()
	synopsis, _, _ := strings.Cut(out, "\n")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	(&ServeFlags{}).Register(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		arg, usage := flag.UnquoteUsage(f)
		if !strings.Contains(synopsis, "[--"+f.Name+" "+arg+"]") {
			t.Errorf("help serve synopsis %q lacks --%s %s", synopsis, f.Name, arg)
		}
		if !strings.Contains(out, "  --"+f.Name+" "+arg) || !strings.Contains(out, usage) {
			t.Errorf("help serve lacks --%s %s: %s", f.Name, arg, usage)
		}
	})
	if n < 6 {
		t.Errorf("ServeFlags registers %d flags; want at least config, state-dir, socket, listen, e2b-listen, e2b-domain", n)
	}
	wantContains(t, "help serve", out, "--e2b-listen HOST:PORT", "--e2b-domain DOMAIN", "an unknown uid is refused")
	if strings.Contains(out, "no authentication") {
		t.Errorf("help serve says the socket has no authentication:\n%s", out)
	}
}

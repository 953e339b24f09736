package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

// What a user meets in the first minutes: help for every verb, usage errors short
// enough to read, and listings whose shape golden files hold.

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// listedVerbs are the verbs the main help lists, read from the help itself.
func listedVerbs(t *testing.T) []string {
	t.Helper()
	var out, errOut bytes.Buffer
	wantExit(t, Run(bg, []string{"help"}, nil, &out, &errOut), 0)
	_, list, _ := strings.Cut(out.String(), "Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	for _, line := range strings.Split(list, "\n") {
		words := strings.Fields(line)
		name := ""
		for i := len(words); i > 0; i-- { // the longest run of words that names a verb
			if cand := strings.Join(words[:i], " "); lookupVerb(cand) != nil || cand == "help" {
				name = cand
				break
			}
		}
		if name == "" {
			t.Errorf("help lists %q, which names no verb", line)
			continue
		}
		if name != "help" {
			names = append(names, name)
		}
	}
	for _, want := range []string{"serve", "agent", "check-config", "create", "image import"} {
		if !slices.Contains(names, want) {
			t.Errorf("help does not list %s", want)
		}
	}
	return names
}

func TestHelpForEveryVerb(t *testing.T) {
	for _, name := range listedVerbs(t) {
		words := strings.Fields(name)
		for _, args := range [][]string{append([]string{"help"}, words...), append(append([]string{}, words...), "--help")} {
			var out, errOut bytes.Buffer
			err := Run(bg, args, nil, &out, &errOut)
			if err != nil {
				t.Errorf("airlock %s: %v, want exit 0\n%s", strings.Join(args, " "), err, errOut.String())
				continue
			}
			if !strings.HasPrefix(out.String(), "usage: airlock "+name+" ") || errOut.Len() > 0 {
				t.Errorf("airlock %s printed\n%s\nstderr %q; want its usage on stdout", strings.Join(args, " "), out.String(), errOut.String())
			}
		}
	}
}

// misspell swaps two letters in the middle of a flag's name: memory becomes memroy.
func misspell(name string) string {
	b := []byte(name)
	i := len(b)/2 - 1
	if b[i] == b[i+1] || b[i] == '-' || b[i+1] == '-' {
		return name + "x"
	}
	b[i], b[i+1] = b[i+1], b[i]
	return string(b)
}

// flagsOf reads a verb's own flags from its help, in the order it lists them.
func flagsOf(t *testing.T, name string) []string {
	var out bytes.Buffer
	wantExit(t, Run(bg, append(strings.Fields(name), "--help"), nil, &out, &bytes.Buffer{}), 0)
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z][a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		flags = append(flags, m[1])
	}
	return flags
}

func TestUsageErrorsAreShort(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock") // no daemon: nothing gets that far
	for _, name := range listedVerbs(t) {
		good := "output"
		if flags := flagsOf(t, name); len(flags) > 0 {
			good = flags[0]
		}
		bad := misspell(good)
		args := append(strings.Fields(name), "--"+bad)
		if lookupVerb(name).daemon {
			good, bad = "", "no-such-flag"
			args = append(strings.Fields(name), "--"+bad)
		} else {
			args = append([]string{"--socket", socket}, args...)
		}
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			wantExit(t, Run(bg, args, strings.NewReader(""), &out, &errOut), 2)
			msg := errOut.String()
			if n := strings.Count(msg, "\n"); n == 0 || n > 3 {
				t.Errorf("usage error of %d lines, want 1 to 3:\n%s", n, msg)
			}
			wantContains(t, "usage error", msg, "--"+bad, "see 'airlock "+name+" --help'")
			if good != "" {
				wantContains(t, "usage error", msg, "did you mean --"+good+"?")
			}
			if strings.Contains(msg, " -"+bad) {
				t.Errorf("usage error names the flag with one dash:\n%s", msg)
			}
			if out.Len() > 0 {
				t.Errorf("stdout = %q, want nothing", out.String())
			}
		})
	}

	// Errors that are not about flags are as short.
	for _, args := range [][]string{{"lss"}, {"image", "lss"}, {"help", "nope"}, {"exec", "box"}, {"rm"}, {"create", "x", "--memory", "lots"}} {
		var out, errOut bytes.Buffer
		wantExit(t, Run(bg, append([]string{"--socket", socket}, args...), nil, &out, &errOut), 2)
		if n := strings.Count(errOut.String(), "\n"); n == 0 || n > 3 {
			t.Errorf("airlock %s: usage error of %d lines, want 1 to 3:\n%s", strings.Join(args, " "), n, errOut.String())
		}
	}
	var errOut bytes.Buffer
	Run(bg, []string{"lss"}, nil, &bytes.Buffer{}, &errOut)
	wantContains(t, "unknown command", errOut.String(), `did you mean "ls"?`)
}

// TestHabits checks that docker's and kubectl's words get the airlock way of saying them,
// in a usage error that is still short.
func TestHabits(t *testing.T) {
	if got := nearest("al", []string{"a", "all", "label", "state"}); got != "all" {
		t.Errorf("nearest(al) = %q, want all: a long flag wins a tie", got)
	}
	if got := nearest("bogus", verbNames()); got != "" {
		t.Errorf("nearest(bogus) = %q, want none: two edits in five letters is no typo", got)
	}
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "box", "-it", "--", "sh"}, "airlock shell NAME"},
		{[]string{"exec", "box", "-t", "--", "sh"}, "airlock shell NAME"},
		{[]string{"run", "--rm", "--", "true"}, "unless --detach"},
		{[]string{"rm", "-f", "box"}, "without it"},
		{[]string{"create", "box", "-p", "80"}, "airlock port expose"},
		{[]string{"stop", "box"}, "airlock suspend NAME"},
		{[]string{"describe", "box"}, "airlock get NAME"},
		{[]string{"images"}, "airlock image ls"},
		{[]string{"get", "box", "-ojson"}, "-o json"},
		{[]string{"--bogus"}, "missing command"},
	} {
		var out, errOut bytes.Buffer
		wantExit(t, Run(bg, append([]string{"--socket", socket}, tt.args...), strings.NewReader(""), &out, &errOut), 2)
		msg := errOut.String()
		if n := strings.Count(msg, "\n"); n == 0 || n > 3 {
			t.Errorf("airlock %s: usage error of %d lines, want 1 to 3:\n%s", strings.Join(tt.args, " "), n, msg)
		}
		wantContains(t, "airlock "+strings.Join(tt.args, " "), msg, tt.want)
		if strings.Contains(msg, "did you mean") {
			t.Errorf("airlock %s: a near miss besides the hint:\n%s", strings.Join(tt.args, " "), msg)
		}
	}
}

// TestBadValues checks that a value the flag package cannot parse is answered with what
// it should look like, not "parse error".
func TestBadValues(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "box", "--timeout", "5", "--", "true"}, "--timeout: want a duration with its unit"},
		{[]string{"create", "box", "--cpu", "two"}, "--cpu: want a number"},
		{[]string{"create", "box", "--pids", "many"}, "--pids: want a whole number"},
	} {
		var out, errOut bytes.Buffer
		wantExit(t, Run(bg, append([]string{"--socket", socket}, tt.args...), nil, &out, &errOut), 2)
		wantContains(t, "airlock "+strings.Join(tt.args, " "), errOut.String(), tt.want)
	}
}

// TestVersionFlag checks docker's airlock --version: the version verb, not the help.
func TestVersionFlag(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{{"--version"}, {"-v"}, {"--socket", socket, "--version"}} {
		var out, errOut bytes.Buffer
		if err := Run(bg, args, nil, &out, &errOut); err != nil {
			t.Errorf("airlock %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		wantContains(t, "airlock "+strings.Join(args, " "), out.String(), "client: ", "server: ")
	}
}

func TestNearest(t *testing.T) {
	flags := []string{"memory", "cpu", "max-lifetime", "output", "open-files"}
	for _, tt := range []struct{ in, want string }{
		{"memroy", "memory"}, {"memory", "memory"}, {"mem", "memory"}, {"cpus", "cpu"},
		{"max-lifetim", "max-lifetime"}, {"o", ""}, {"zzzzzz", ""}, {"open", "open-files"},
		{"memry", "memory"}, {"cpx", "cpu"}, {"opnut", ""},
	} {
		if got := nearest(tt.in, flags); got != tt.want {
			t.Errorf("nearest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// normalizer replaces what changes from run to run (ids, times, ages, digests) with
// stable placeholders of the same length, so that tables keep their alignment; the same
// id gets the same placeholder throughout a test, numbered in order of appearance.
type normalizer struct{ ids map[string]string }

var (
	idRE     = regexp.MustCompile(`\b(sb|op|snap|req)_[0-9A-Za-z]+\b`)
	timeRE   = regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?`)
	ageRE    = regexp.MustCompile(`\b\d+[smhd] ago\b`)
	digestRE = regexp.MustCompile(`sha256:[0-9a-f]{12,64}`)
	digitRE  = regexp.MustCompile(`\d`)
	fracRE   = regexp.MustCompile(`\.\d+`)
)

func (n *normalizer) apply(s string) string {
	if n.ids == nil {
		n.ids = map[string]string{}
	}
	s = idRE.ReplaceAllStringFunc(s, func(id string) string {
		if p, ok := n.ids[id]; ok {
			return p
		}
		kind, _, _ := strings.Cut(id, "_")
		count := 1
		for k := range n.ids {
			if strings.HasPrefix(k, kind+"_") {
				count++
			}
		}
		num := strconv.Itoa(count)
		n.ids[id] = kind + "_" + strings.Repeat("0", max(len(id)-len(kind)-1-len(num), 0)) + num
		return n.ids[id]
	})
	zero := func(m string) string { // and a zone other than UTC is written as UTC's
		m = digitRE.ReplaceAllString(fracRE.ReplaceAllString(m, ""), "0") // JSON's nanoseconds vary in length
		if z := len(m) - len("+00:00"); z > 0 && (m[z] == '+' || m[z] == '-') && m[z-3] == ':' {
			m = m[:z] + "Z"
		}
		return m
	}
	s = timeRE.ReplaceAllStringFunc(s, zero)
	s = ageRE.ReplaceAllStringFunc(s, zero)
	return digestRE.ReplaceAllStringFunc(s, func(d string) string { return "sha256:" + strings.Repeat("0", len(d)-len("sha256:")) })
}

// golden compares got with testdata/golden/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", t.Name(), path, got, want)
	}
}

// TestGoldenOutput runs one scenario and checks each verb's answer, in table and JSON.
func TestGoldenOutput(t *testing.T) {
	n := newNode(t)
	var norm normalizer
	n.must(t, "create", "alpha", "--cpu", "2", "--memory", "1G", "--disk", "2G", "--label", "team=x",
		"--network", "allowlist", "--allow", "api.example.com", "--max-lifetime", "2h")
	n.must(t, "create", "beta")
	n.must(t, "rm", "beta")
	n.must(t, "create", "beta") // the name again: ls shows it once, ls -a twice
	n.must(t, "create", "gamma")
	n.must(t, "create", "delta")
	norm.apply(n.must(t, "ls", "-a", "-o", "json")) // number the ids in creation order

	for _, tc := range []struct {
		file string
		args []string
	}{
		{"ls.txt", []string{"ls"}},
		{"ls.json", []string{"ls", "-o", "json"}},
		{"ls-all.txt", []string{"ls", "-a"}},
		{"ls-all.json", []string{"ls", "--all", "-o", "json"}},
		{"get.txt", []string{"get", "alpha"}},
		{"get.json", []string{"get", "alpha", "-o", "json"}},
		{"rm.txt", []string{"rm", "gamma", "delta"}},
		{"events.txt", []string{"events"}},
		{"events.json", []string{"events", "-o", "json"}},
		{"events-alpha.txt", []string{"events", "alpha", "--after", "1"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			out, errOut, err := n.run(bg, "", tc.args...)
			wantExit(t, err, 0)
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
			golden(t, tc.file, norm.apply(out))
		})
	}

	// rm of several names in JSON, with one that fails: the others still go.
	n.must(t, "create", "eps")
	n.must(t, "create", "zeta")
	out, errOut, err := n.run(bg, "", "rm", "eps", "nope", "zeta", "-o", "json")
	wantExit(t, err, 1)
	wantContains(t, "rm with a missing name", errOut, "nope", "not_found")
	golden(t, "rm.json", norm.apply(out))
	for _, name := range []string{"eps", "zeta"} {
		if st := n.sandbox(t, name).State; st != "terminated" {
			t.Errorf("%s is %s after rm, want terminated", name, st)
		}
	}
}

func TestRestorePrintsSafetySnapshot(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	var snap struct {
		Snapshot struct{ ID string } `json:"snapshot"`
	}
	out := n.must(t, "snapshot", "create", "box", "-o", "json")
	if err := json.Unmarshal([]byte(out), &snap); err != nil || snap.Snapshot.ID == "" {
		t.Fatalf("snapshot create -o json = %q (%v)", out, err)
	}
	n.must(t, "suspend", "box")
	out = n.must(t, "restore", "box", snap.Snapshot.ID)
	m := regexp.MustCompile(`safety snapshot (snap_\w+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("restore =\n%s\nwant the safety snapshot's id", out)
	}
	if _, err := n.Client.GetSnapshot(bg, m[1]); err != nil {
		t.Errorf("the safety snapshot %s it printed: %v", m[1], err)
	}
	out = n.must(t, "restore", "box", snap.Snapshot.ID, "--no-safety-snapshot")
	if strings.Contains(out, "safety snapshot") {
		t.Errorf("restore --no-safety-snapshot =\n%s\nwant no safety snapshot", out)
	}
}

func TestLimitRefusals(t *testing.T) {
	n := newNode(t)
	_, errOut, err := n.run(bg, "", "create", "box", "--max-lifetime", "0")
	wantExit(t, err, 1)
	wantContains(t, "--max-lifetime 0", errOut, "--max-lifetime 0s is out of range", "from 1m0s to 720h0m0s", "(invalid_argument)")
	_, errOut, err = n.run(bg, "", "create", "box", "--cpu", "100")
	wantExit(t, err, 1)
	wantContains(t, "--cpu 100", errOut, "--cpu 100 is more than the allowed 64 cores", "(invalid_argument)")
	if list, _ := n.Client.List(bg, client.ListOptions{}); len(list) != 0 {
		t.Errorf("refused creates left %d sandboxes", len(list))
	}
}

func TestExecWarnsOfUnreadStdin(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	path := filepath.Join(t.TempDir(), "in")
	os.WriteFile(path, []byte("data"), 0o644)
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"exec", "box", "--", "true"}, true},
		{[]string{"exec", "box", "--stdin", "--", "cat"}, false},
	} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err = Run(bg, append([]string{"--socket", n.Socket}, tc.args...), f, &out, &errOut)
		f.Close()
		wantExit(t, err, 0)
		if got := strings.Contains(errOut.String(), "without --stdin"); got != tc.warn {
			t.Errorf("airlock %s < file: stderr %q; want the --stdin hint: %v", strings.Join(tc.args, " "), errOut.String(), tc.warn)
		}
	}
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	var errOut bytes.Buffer
	wantExit(t, Run(bg, []string{"--socket", n.Socket, "exec", "box", "--", "true"}, devnull, &bytes.Buffer{}, &errOut), 0)
	if errOut.Len() > 0 {
		t.Errorf("exec < /dev/null: stderr %q, want nothing", errOut.String())
	}
}

func TestPortExposeThroughTheSocket(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	out := n.must(t, "port", "expose", "box", "8080")
	wantContains(t, "port expose", out, "curl --unix-socket "+n.Socket+" -H 'X-Airlock-Port-Token: ", "http://airlock/v1/ports/")
}

// TestFollowPrintsOneLineAnEvent: events --follow and egress log --follow, in table and
// JSON (one object a line), end quietly on an interrupt.
func TestFollowPrintsOneLineAnEvent(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	for _, tc := range []struct {
		args []string
		want string // in the output once the follow has caught up
	}{
		{[]string{"events", "--follow"}, "creating → running (create)"},
		{[]string{"events", "box", "-f", "-o", "json"}, `"type":"state"`},
		{[]string{"egress", "log", "box", "--follow"}, "DECISION"},
	} {
		ctx, cancel := context.WithCancel(bg)
		var out, errOut testenv.LockedBuffer
		done := make(chan error, 1)
		go func() { done <- Run(ctx, append([]string{"--socket", n.Socket}, tc.args...), nil, &out, &errOut) }()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), tc.want) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		wantExit(t, <-done, 0)
		got := out.String()
		wantContains(t, strings.Join(tc.args, " "), got, tc.want)
		if slices.Contains(tc.args, "json") {
			for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
				if !json.Valid([]byte(line)) {
					t.Errorf("%s: line %q is not one JSON object", strings.Join(tc.args, " "), line)
				}
			}
		}
		if errOut.String() != "" {
			t.Errorf("%s: stderr %q", strings.Join(tc.args, " "), errOut.String())
		}
	}
}

func TestDescribeEvent(t *testing.T) {
	name := func(id string) string { return map[string]string{"sb_1": "parent"}[id] }
	for _, tt := range []struct {
		typ, cause string
		data       map[string]any
		want       string
	}{
		{"state", "idle", map[string]any{"from": "running", "to": "suspending"}, "running → suspending (idle)"},
		{"created", "fork", map[string]any{"from": "sb_1", "snapshot": "snap_2"}, "created as a fork of parent (snapshot snap_2)"},
		{"limit", "memory", map[string]any{"limit": float64(1 << 30)}, "hit its memory limit (1GiB): a process was killed"},
		{"limit", "pids", map[string]any{"limit": float64(100), "refused_forks": float64(3)}, "hit its process limit (100): 3 forks refused"},
		{"port", "expose", map[string]any{"port": float64(8080), "public": false}, "port 8080 exposed (token needed)"},
		{"network", "policy", map[string]any{"mode": "allowlist", "allow": []any{"a.example"}}, "egress policy set to allowlist, allowing a.example"},
		{"safety_snapshot", "restore", map[string]any{"snapshot": "snap_3"}, "safety snapshot snap_3 taken before a restore"},
		{"egress", "", map[string]any{"Host": "example.com", "Port": float64(443), "Method": "CONNECT", "Allowed": false,
			"Decision": "deny", "Reason": "not in the allowlist", "repeats": float64(2)}, "refused CONNECT example.com:443: not in the allowlist (and 2 more like it)"},
		{"egress", "", map[string]any{"Host": "api.example.com", "Port": float64(443), "Method": "GET", "Allowed": true,
			"Decision": "allow", "Rule": "api.example.com", "BytesUp": float64(10), "BytesDown": float64(2048)}, "allowed GET api.example.com:443 (rule api.example.com), 10B up, 2KiB down"},
		{"dns", "", map[string]any{"Name": "example.com", "Type": "A", "Rcode": "REFUSED", "Allowed": false, "Reason": "denied"}, "DNS A example.com: REFUSED, refused: denied"},
		{"something_new", "why", map[string]any{"k": "v"}, `something_new (why) {"k":"v"}`},
	} {
		got := describeEvent(api.Event{Type: tt.typ, Cause: tt.cause, Data: tt.data}, name)
		if got != tt.want {
			t.Errorf("%s/%s = %q, want %q", tt.typ, tt.cause, got, tt.want)
		}
	}
}

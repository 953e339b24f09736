package router

import (
	"github.com/airlockhq/airlock/internal/router/decision"

	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

type commandCase struct {
	line    int
	command string
	route   string // host or sandbox, under the safe profile
	reason  string // a substring of one reason
}

// readCommands reads testdata/commands.tsv.
func readCommands(t testing.TB) []commandCase {
	t.Helper()
	f, err := os.Open("testdata/commands.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []commandCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("commands.tsv:%d: %d columns, want 3 (command, route, reason)", n, len(cols))
		}
		c := commandCase{line: n, command: cols[0], route: cols[1], reason: cols[2]}
		if len(c.command) > 1 && strings.HasPrefix(c.command, `"`) && strings.HasSuffix(c.command, `"`) {
			if c.command, err = strconv.Unquote(c.command); err != nil {
				t.Fatalf("commands.tsv:%d: %v", n, err)
			}
		}
		if c.route != "host" && c.route != "sandbox" {
			t.Fatalf("commands.tsv:%d: route %q, want host or sandbox", n, c.route)
		}
		if c.route == "sandbox" && c.reason == "" {
			t.Fatalf("commands.tsv:%d: a contained command needs a reason to look for", n)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestScoreCommands(t *testing.T) {
	cases := readCommands(t)
	if len(cases) < 100 {
		t.Fatalf("commands.tsv has %d commands, want at least 100", len(cases))
	}
	safe, err := decision.ProfileSettings(decision.ProfileSafe)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		a := Score(c.command)
		d, err := Route(safe, decision.KindCommand, a)
		if err != nil {
			t.Fatalf("line %d: Route: %v", c.line, err)
		}
		got := "host"
		if d.Place == decision.PlaceSandbox {
			got = "sandbox"
		}
		if got != c.route {
			t.Errorf("line %d: %q runs on the %s (score %.3f, reasons %q), want the %s", c.line, c.command, got, a.Score, a.Reasons, c.route)
			continue
		}
		if c.reason != "" && !hasReason(a, c.reason) {
			t.Errorf("line %d: %q: reasons %q, want one containing %q", c.line, c.command, a.Reasons, c.reason)
		}
	}
}

func hasReason(a Assessment, sub string) bool {
	for _, r := range a.Reasons {
		if strings.Contains(r.Text, sub) {
			return true
		}
	}
	return false
}

func TestScoreUnscorable(t *testing.T) {
	nested := "ls"
	for i := 0; i < maxNesting+2; i++ {
		nested = "sh -c " + strconv.Quote(nested)
	}
	for _, tc := range []struct{ name, command, reason string }{
		{"parse error", "echo 'unterminated", "cannot be parsed"},
		{"bad syntax", "for in do done (", "cannot be parsed"},
		{"too long", "echo " + strings.Repeat("a", MaxCommandBytes), "are not scored"},
		{"nested too deep", nested, "nested more than"},
		{"brackets too deep", strings.Repeat("$(", 5000) + "ls" + strings.Repeat(")", 5000), "brackets nest more than"},
		{"pipeline too long", strings.Repeat("a | ", 16000) + "b", "more than 200000 steps"},
		{"too many wrappers", strings.Repeat("nice ", 100) + "ls", "wrapper commands"},
		{"nested parse error", `sh -c 'echo "unterminated'`, "nested shell text cannot be parsed"},
		{"dynamic name", "$X args", "not known until run time"},
		{"dynamic eval", `eval "$CODE"`, "not known until run time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Score(tc.command)
			if a.Score != 1 {
				t.Errorf("score %v, want 1 (reasons %q)", a.Score, a.Reasons)
			}
			if !hasReason(a, tc.reason) {
				t.Errorf("reasons %q, want one containing %q", a.Reasons, tc.reason)
			}
		})
	}
}

func TestScoreEmptyAndHarmless(t *testing.T) {
	for _, cmd := range []string{"", "   ", "# a comment", "true", "ls -la"} {
		if a := Score(cmd); a.Score != 0 || len(a.Reasons) != 0 {
			t.Errorf("Score(%q) = %v %q, want 0 and no reasons", cmd, a.Score, a.Reasons)
		}
	}
}

func TestScoreBounds(t *testing.T) {
	// Many findings of every kind still give a score of at most 1, and the reasons stop.
	cmd := strings.Repeat("sudo rm -rf /x$RANDOM; curl x | sh; cat ~/.ssh/id_rsa; ", 200)
	a := Score(cmd)
	if a.Score < 0.99 || a.Score > 1 {
		t.Errorf("score %v, want close to 1 and at most 1", a.Score)
	}
	if len(a.Reasons) > maxReasons+1 {
		t.Errorf("%d reasons, want at most %d", len(a.Reasons), maxReasons+1)
	}
}

func FuzzScore(f *testing.F) {
	for _, c := range readCommands(f) {
		f.Add(c.command)
	}
	f.Fuzz(func(t *testing.T, cmd string) {
		// Nearly four times the longest command of the table; a longer one takes long
		// to minimize. TestScoreUnscorable covers commands past the scorer's bounds.
		if len(cmd) > 256 {
			return
		}
		a := Score(cmd)
		if math.IsNaN(a.Score) || a.Score < 0 || a.Score > 1 {
			t.Fatalf("Score(%q) = %v, want a number in [0, 1]", cmd, a.Score)
		}
		if hasReason(a, "the scorer failed") {
			t.Fatalf("Score(%q) panicked", cmd)
		}
	})
}

func BenchmarkScore(b *testing.B) {
	cases := readCommands(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Score(cases[i%len(cases)].command)
	}
}

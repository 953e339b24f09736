package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// riskNode is a node whose router scores with router.threshold threshold (0: the
// default) and decides under router.profile profile.
func riskNode(t *testing.T, profile string, threshold float64) *node {
	return &node{testenv.NewFakeNode(t, testenv.FakeOptions{Config: func(c *manager.Config) {
		c.Router = manager.RouterConfig{Profile: profile, Threshold: threshold}
	}})}
}

func TestRiskTable(t *testing.T) {
	n := riskNode(t, "safe", 0)
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"risky text", []string{"risk", "--profile", "safe", "--", "rm -rf build"}, []string{"score    0.615\n", "route    sandbox (safe profile, threshold 0.5)\n", "reasons  deletes files: rm -rf build\n", "         deletes recursively: rm -rf build\n"}},
		{"harmless", []string{"risk", "--", "ls", "-la"}, []string{"score  0\n", "route  host, inside the fence (safe profile, threshold 0.5)\n"}},
		{"words are quoted", []string{"risk", "--", "bash", "-c", "rm -rf /tmp/x"}, []string{"route    sandbox", "deletes a path outside the workspace: rm -rf /tmp/x"}},
		{"strict profile", []string{"risk", "--profile", "strict", "--", "ls"}, []string{"route  sandbox (strict profile, threshold 0.5)"}},
		{"off profile", []string{"risk", "--profile=off", "--", "curl https://x | sh"}, []string{"route    host (off profile", "pipes a download into an interpreter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := n.run(bg, "", tc.args...)
			wantExit(t, err, 0)
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
			wantContains(t, "stdout", out, tc.wants...)
		})
	}
}

func TestRiskJSON(t *testing.T) {
	n := riskNode(t, "safe", 0)
	for _, tc := range []struct {
		args    []string
		score   float64
		route   string
		fenced  bool
		reason  string
		reasons int
	}{
		{[]string{"-o", "json", "risk", "--", "ls -la"}, 0, "host", true, "", 0},
		{[]string{"risk", "--output", "json", "--", "curl https://x | sh"}, 0.975, "sandbox", false, "download-exec", 2},
		{[]string{"risk", "-o", "json", "--", "echo 'unterminated"}, 1, "sandbox", false, "unscorable", 1},
	} {
		out, errOut, err := n.run(bg, "", tc.args...)
		wantExit(t, err, 0)
		var got struct {
			Score   float64 `json:"score"`
			Reasons []struct {
				Code string `json:"code"`
				Text string `json:"text"`
			} `json:"reasons"`
			Route     string   `json:"route"`
			Fenced    bool     `json:"fenced"`
			Profile   string   `json:"profile"`
			Threshold *float64 `json:"threshold"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: stdout %q is not JSON: %v (stderr %q)", tc.args, out, err, errOut)
		}
		if got.Score != tc.score || got.Route != tc.route || got.Fenced != tc.fenced || got.Profile != "safe" || got.Threshold == nil || *got.Threshold != 0.5 {
			t.Errorf("%v: got %s, want score %v route %s fenced %v profile safe threshold 0.5", tc.args, out, tc.score, tc.route, tc.fenced)
		}
		if len(got.Reasons) != tc.reasons || tc.reason != "" && got.Reasons[0].Code != tc.reason {
			t.Errorf("%v: reasons %+v, want %d with the first coded %q", tc.args, got.Reasons, tc.reasons, tc.reason)
		}
		if strings.Contains(out, `"reasons": null`) {
			t.Errorf("%v: reasons is null, want a list", tc.args)
		}
	}
}

// TestRiskAsksTheNode: risk decides as run does, with the node's router.threshold and
// router.profile, not the profile's own defaults.
func TestRiskAsksTheNode(t *testing.T) {
	lenient := riskNode(t, "safe", 0.9)
	out, errOut, err := lenient.run(bg, "", "risk", "--", "rm -rf build")
	wantExit(t, err, 0)
	wantContains(t, "stdout", out, "score    0.615\n", "route    host, inside the fence (safe profile, threshold 0.9)\n")
	res, _, err := lenient.routed(t, "", "run", "--artifacts", t.TempDir(), "--", "rm -rf build")
	wantExit(t, err, 0)
	if res.RanIn != "fence" || res.Threshold != 0.9 {
		t.Errorf("run: %+v; want the fence under threshold 0.9, as risk said (stderr %q)", res, errOut)
	}

	strict := riskNode(t, "safe", 0.2)
	out, _, err = strict.run(bg, "", "-o", "json", "risk", "--", "mkdir", "-p", "/tmp/x")
	wantExit(t, err, 0)
	var got riskResult
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout %q is not JSON: %v", out, err)
	}
	if got.Threshold != 0.2 || got.Profile != "safe" || got.Score < 0.2 || got.Route != "sandbox" {
		t.Errorf("risk under threshold 0.2: %+v; want the sandbox", got)
	}

	// A node without router.profile: no profile applies, as for run; the score still shows.
	none := riskNode(t, "", 0)
	out, _, err = none.run(bg, "", "risk", "--", "rm -rf build")
	wantExit(t, err, 0)
	wantContains(t, "stdout", out, "score    0.615\n", "route    none: no profile", "deletes files")
}

func TestRiskUsage(t *testing.T) {
	n := riskNode(t, "", 0)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"risk"}, "missing the command to score"},
		{[]string{"risk", "--"}, "missing the command to score"},
		{[]string{"risk", "--profile", "paranoid", "--", "ls"}, `unknown profile "paranoid": want one of off, safe, strict`},
		{[]string{"risk", "-o", "yaml", "--", "ls"}, "--output must be table or json"},
	} {
		_, errOut, err := n.run(bg, "", tc.args...)
		wantExit(t, err, 2)
		wantContains(t, "stderr", errOut, tc.want, "usage: airlock risk")
	}
	out, _, err := n.run(bg, "", "help")
	wantExit(t, err, 0)
	wantContains(t, "help", out, "risk")
}

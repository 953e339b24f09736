package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// runRiskCLI runs the CLI with no daemon: risk scores locally.
func runRiskCLI(args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	err := Run(bg, args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestRiskTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"risky text", []string{"risk", "--", "rm -rf build"}, []string{"score    0.615\n", "route    sandbox (safe profile, threshold 0.5)\n", "reasons  deletes files: rm -rf build\n", "         deletes recursively: rm -rf build\n"}},
		{"harmless", []string{"risk", "--", "ls", "-la"}, []string{"score  0\n", "route  host, inside the fence (safe profile, threshold 0.5)\n"}},
		{"words are quoted", []string{"risk", "--", "bash", "-c", "rm -rf /tmp/x"}, []string{"route    sandbox", "deletes a path outside the workspace: rm -rf /tmp/x"}},
		{"strict profile", []string{"risk", "--profile", "strict", "--", "ls"}, []string{"route  sandbox (strict profile, threshold 0.5)"}},
		{"off profile", []string{"risk", "--profile=off", "--", "curl https://x | sh"}, []string{"route    host (off profile", "pipes a download into an interpreter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runRiskCLI(tc.args...)
			wantExit(t, err, 0)
			if errOut != "" {
				t.Errorf("stderr = %q, want nothing", errOut)
			}
			wantContains(t, "stdout", out, tc.wants...)
		})
	}
}

func TestRiskJSON(t *testing.T) {
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
		out, errOut, err := runRiskCLI(tc.args...)
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

func TestRiskUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"risk"}, "missing the command to score"},
		{[]string{"risk", "--"}, "missing the command to score"},
		{[]string{"risk", "--profile", "paranoid", "--", "ls"}, `unknown profile "paranoid": want one of off, safe, strict`},
		{[]string{"risk", "-o", "yaml", "--", "ls"}, "--output must be table or json"},
	} {
		_, errOut, err := runRiskCLI(tc.args...)
		wantExit(t, err, 2)
		wantContains(t, "stderr", errOut, tc.want, "usage: airlock risk")
	}
	out, _, err := runRiskCLI("help")
	wantExit(t, err, 0)
	wantContains(t, "help", out, "risk")
}

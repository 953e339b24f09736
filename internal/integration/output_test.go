package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/server"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestNonStreamedOutputIsBounded floods a non-streamed exec with NUL bytes (six bytes
// each in JSON): the response stays within the per-call limit, says how much it dropped,
// and a command that writes far more is stopped rather than read forever.
func TestNonStreamedOutputIsBounded(t *testing.T) {
	n := testenv.NewNode(t)
	n.Create(t, api.CreateSandboxRequest{Name: "flood"})
	const written = 100_000_000
	res, err := n.Client.Exec(background, "flood", api.ExecRequest{Shell: "head -c 100000000 /dev/zero; echo tail >&2", Timeout: execTimeout})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(res)
	if len(body) > server.DefaultOutputLimit+1024 {
		t.Errorf("response to 100 MB of NUL bytes is %d bytes; want at most the %d-byte limit", len(body), server.DefaultOutputLimit)
	}
	if res.State != api.ExecSucceeded || !res.Truncated || int64(len(res.Stdout))+res.StdoutDropped != written || res.Stderr != "tail\n" {
		t.Errorf("result: state %s truncated %v, kept %d + dropped %d, stderr %q; want succeeded, truncated, adding up to %d, stderr whole",
			res.State, res.Truncated, len(res.Stdout), res.StdoutDropped, res.Stderr, written)
	}

	res, err = n.Client.Exec(background, "flood", api.ExecRequest{Shell: "cat /dev/zero", Timeout: execTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if res.State == api.ExecSucceeded || res.State == api.ExecTimeout || !strings.Contains(res.Error, "stopped") || !res.Truncated {
		t.Errorf("endless output: state %s, error %q, truncated %v; want the command stopped, saying why", res.State, res.Error, res.Truncated)
	}
}

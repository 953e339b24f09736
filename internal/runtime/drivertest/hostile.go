package drivertest

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/agentproto"
)

// redirectScript is what sandbox code that wants another sandbox's agent would do: find
// every socket it can see, work out from its own mount table where that socket lives
// on the host, and put in its place a link to the same place of the victim ($VICTIM,
// whose id the attacker is assumed to know). $SELF is the attacker's own id. It reports
// what it replaced.
const redirectScript = `
find / -path /proc -prune -o -path /sys -prune -o -type s -print 2>/dev/null | while read -r s; do
  d=$(dirname "$s"); b=$(basename "$s")
  awk -v mp="$d" '$5==mp {print $4}' /proc/self/mountinfo | while read -r hp; do
    case "$hp" in *"$SELF"*) ;; *) continue ;; esac
    target=$(echo "$hp" | sed "s/$SELF/$VICTIM/g")/$b
    rm -f "$s" && ln -s "$target" "$s" && echo "replaced $s -> $target"
  done
done
true
`

// hostile checks that sandbox code cannot turn the driver against another sandbox or
// learn where the sandbox lives on the host.
func hostile(t *testing.T, h Harness, run func(*testing.T, string), exec func(*testing.T, string, string) string) {
	ctx := context.Background()
	d := h.Driver

	t.Run("AgentChannelCannotBeRedirected", func(t *testing.T) {
		attacker, victim := newID(t), newID(t)
		run(t, attacker)
		run(t, victim)
		exec(t, victim, "echo victim-secret-4711 > /root/secret")
		exec(t, attacker, "mkdir -p /root && echo attacker-own > /root/secret")
		out := exec(t, attacker, "SELF="+attacker+" VICTIM="+victim+"\n"+redirectScript)
		t.Logf("attack: %s", strings.TrimSpace(out))
		// The daemon's next call for the attacker must reach the attacker's own agent
		// or fail; it must never reach the victim.
		var got bytes.Buffer
		cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, attacker) }}
		_, err := cl.Exec(ctx, agentproto.ExecSpec{Shell: "cat /root/secret"}, nil, &got, &got)
		if strings.Contains(got.String(), "victim-secret-4711") {
			t.Fatalf("an exec in the attacker's sandbox ran in the victim's: %q", got.String())
		}
		if err == nil && !strings.Contains(got.String(), "attacker-own") {
			t.Fatalf("exec in the attacker's sandbox = %q, want its own file", got.String())
		}
	})

	t.Run("HostPathsStayOutside", func(t *testing.T) {
		id := newID(t)
		run(t, id)
		out := exec(t, id, "cat /proc/self/mountinfo /proc/1/mountinfo; ls -l /proc/1/fd/ /proc/self/fd/ 2>&1; cat /proc/1/environ /proc/1/cmdline 2>&1 | tr '\\0' ' '; true")
		for _, p := range append([]string{id}, h.HostDirs...) {
			if p != "" && strings.Contains(out, p) {
				t.Errorf("sandbox sees host path or id %q:\n%s", p, out)
			}
		}
	})
}

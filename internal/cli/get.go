package cli

import (
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
)

var getVerb = &verb{
	name:  "get",
	args:  "NAME",
	short: "show one sandbox (by name or id)",
	run:   runGet,
}

func runGet(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	sb, err := cl.Get(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(sb)
	}
	return printFields(c.stdout, sandboxFields(sb))
}

func sandboxFields(sb *api.Sandbox) [][2]string {
	f := [][2]string{
		{"name", sb.Name},
		{"id", sb.ID},
		{"state", sb.State},
		{"image", sb.Image},
		{"image digest", orNone(sb.ImageDigest)}, // what it runs, however the name moves
		{"runtime", sb.Runtime},
		{"role", orNone(sb.Role)},
		{"generation", strconv.FormatInt(sb.Generation, 10)},
		{"version", strconv.FormatInt(sb.Version, 10)},
		{"cpu", orDash(sb.Limits.CPU, formatCPU)},
		{"memory", orDash(sb.Limits.Memory, formatSize)},
		{"pids", orDash(sb.Limits.PIDs, formatInt)},
		{"open_files", orDash(sb.Limits.OpenFiles, formatInt)},
		{"disk", orDash(sb.Limits.Disk, formatSize)},
		{"network", networkSummary(sb.Network)},
		{"labels", formatMap(sb.Labels)},
		{"env", formatMap(sb.Env)},
		{"created", formatTime(sb.CreatedAt)},
		{"last_activity", formatTime(sb.LastActivity)},
		{"expires", formatTime(sb.ExpiresAt)},
		{"idle_suspend", sb.IdleSuspend},
		{"ttl", sb.TTL},
	}
	if ws := sb.Workspace; ws != nil {
		f = append(f, [2]string{"workspace", ws.Path + " at /workspace (" + ws.Access + ")"})
	}
	for _, v := range sb.Volumes {
		access := "rw"
		if v.ReadOnly {
			access = "ro"
		}
		f = append(f, [2]string{"volume", v.Name + " at " + v.Path + " (" + access + ")"})
	}
	if sb.SuspendedAt != nil {
		f = append(f, [2]string{"suspended_at", formatTime(*sb.SuspendedAt)})
	}
	if sb.Failure != "" {
		f = append(f, [2]string{"failure", sb.Failure})
	}
	return f
}

// networkSummary is an egress policy on one line: "allowlist (allow a.example b.example)".
func networkSummary(p api.NetworkPolicy) string {
	s := orNone(p.Mode)
	var more []string
	if len(p.Allow) > 0 {
		more = append(more, "allow "+strings.Join(p.Allow, " "))
	}
	if len(p.AllowPrivate) > 0 {
		more = append(more, "allow_private "+strings.Join(p.AllowPrivate, " "))
	}
	if len(more) > 0 {
		s += " (" + strings.Join(more, "; ") + ")"
	}
	return s
}

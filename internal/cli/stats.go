package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
)

var statsVerb = &verb{
	name:  "stats",
	args:  "[NAME...] [--follow] [--all-owners]",
	short: "show sandboxes' CPU, memory, disk, process and network use",
	long: `One line per sandbox, as docker stats shows containers: CPU in cores and as a share of
its limit, memory used and its limit, disk used and its size, processes, bytes received
and sent, and open TCP connections. Every figure is the host kernel's own accounting
(the sandbox's cgroup, its disk's file system, the host side of its link), sampled by
the daemon every 10 seconds (metrics.interval); a sandbox that is not running shows
zeros. Without NAME, every sandbox you can see that is not terminated.

With --follow, the table is printed again every 2 seconds until interrupted; with
-o json, each sandbox's usage is one JSON object a line then, and without --follow a
JSON array.`,
	run: runStats,
}

// statsFollowEvery is how often --follow asks again: the daemon's samples change no
// faster than its metrics.interval (10 s by default).
const statsFollowEvery = 2 * time.Second

func runStats(c *cmd, args []string) error {
	follow := c.fs.Bool("follow", false, "keep printing until interrupted")
	c.fs.BoolVar(follow, "f", false, "short for --follow")
	allOwners := c.fs.Bool("all-owners", false, "every owner's sandboxes (admin only)")
	refs, cl, err := c.connect(args, -1)
	if err != nil {
		return err
	}
	read := func() ([]api.SandboxStats, error) {
		if len(refs) == 0 {
			return cl.AllStats(c.ctx, *allOwners)
		}
		out := make([]api.SandboxStats, 0, len(refs))
		for _, ref := range refs {
			st, err := cl.Stats(c.ctx, ref, false)
			if err != nil {
				return nil, err
			}
			out = append(out, *st)
		}
		return out, nil
	}
	list, err := read()
	if err != nil {
		return err
	}
	if !*follow {
		if c.json() {
			return c.printJSON(list)
		}
		return printStats(c, list)
	}
	t := time.NewTicker(statsFollowEvery)
	defer t.Stop()
	for {
		if c.json() {
			for _, st := range list {
				if err := c.printJSONLine(st); err != nil {
					return err
				}
			}
		} else {
			if err := printStats(c, list); err != nil {
				return err
			}
			fmt.Fprintln(c.stdout)
		}
		select {
		case <-c.ctx.Done():
			return nil
		case <-t.C:
		}
		if list, err = read(); err != nil {
			return endOfFollow(c, err)
		}
	}
}

var statsColumns = []string{"NAME", "STATE", "CPU", "CPU %", "MEM USAGE / LIMIT", "MEM %", "DISK USAGE / SIZE", "PIDS", "NET RX / TX", "CONNS"}

func printStats(c *cmd, list []api.SandboxStats) error {
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, strings.Join(statsColumns, "\t"))
	for _, st := range list {
		fmt.Fprintln(tw, strings.Join(statsRow(st), "\t"))
	}
	return tw.Flush()
}

func statsRow(st api.SandboxStats) []string {
	return []string{st.Name, st.State,
		strconv.FormatFloat(st.CPU.Cores, 'f', 2, 64), percent(st.CPU.Cores, st.CPU.LimitCores),
		formatSize(st.Memory.UsedBytes) + " / " + orDash(st.Memory.LimitBytes, formatSize),
		percent(float64(st.Memory.UsedBytes), float64(st.Memory.LimitBytes)),
		formatSize(st.Disk.UsedBytes) + " / " + orDash(st.Disk.LimitBytes, formatSize),
		formatInt(st.PIDs.Current),
		formatSize(int64(st.Network.RxBytes)) + " / " + formatSize(int64(st.Network.TxBytes)),
		formatInt(st.Network.Connections)}
}

// percent is used as a share of limit, "-" without a limit.
func percent(used, limit float64) string {
	if limit <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*used/limit, 'f', 1, 64) + "%"
}

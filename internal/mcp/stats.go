package mcp

import (
	"context"
	"fmt"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
)

// addStatsTools registers sandbox_stats.
func (t *tools) addStatsTools(r *registry) {
	add(r, &mcpsdk.Tool{
		Name:  "sandbox_stats",
		Title: "A sandbox's resource use",
		Description: "Show how much CPU, memory, disk, processes and network a sandbox uses now, against its limits, " +
			"as the host measures it (sampled every few seconds). A sandbox that is not running shows zeros.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, nil, t.sandboxStats)
}

func (t *tools) sandboxStats(ctx context.Context, _ *mcpsdk.CallToolRequest, in SandboxRef) (*mcpsdk.CallToolResult, api.SandboxStats, error) {
	st, err := t.cl.Stats(ctx, in.Sandbox, false)
	if err != nil {
		return nil, api.SandboxStats{}, err
	}
	pct := func(used, limit float64) string {
		if limit <= 0 {
			return "no limit"
		}
		return fmt.Sprintf("%.0f%% of %s", 100*used/limit, fmt.Sprint(limit))
	}
	text := fmt.Sprintf("%s (%s): %s\ncpu: %.2f cores (%s cores)\nmemory: %d MiB (%s MiB)\ndisk: %d MiB used of %d MiB\n"+
		"processes: %d of %d\nnetwork: %d bytes in, %d bytes out, %d open TCP connections\n",
		st.Name, st.ID, st.State, st.CPU.Cores, pct(st.CPU.Cores, st.CPU.LimitCores),
		st.Memory.UsedBytes>>20, pct(float64(st.Memory.UsedBytes>>20), float64(st.Memory.LimitBytes>>20)),
		st.Disk.UsedBytes>>20, st.Disk.LimitBytes>>20, st.PIDs.Current, st.PIDs.Limit,
		st.Network.RxBytes, st.Network.TxBytes, st.Network.Connections)
	return textResult(text), *st, nil
}

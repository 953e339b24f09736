package mcp

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// CreateSandboxInput is the input of create_sandbox.
type CreateSandboxInput struct {
	Name        string             `json:"name" jsonschema:"the sandbox's name, unique among yours: 1 to 63 lowercase letters, digits or '-', starting and ending with a letter or digit"`
	Image       string             `json:"image,omitempty" jsonschema:"image to run: an image here, or a registry reference such as python:3.12-slim, pulled when it is not here (default: host, the node's own /usr tree, read-only)"`
	CPU         float64            `json:"cpu,omitempty" jsonschema:"CPU limit in cores (default: the node's)"`
	MemoryMB    int64              `json:"memory_mb,omitempty" jsonschema:"memory limit in MiB (default: the node's)"`
	Env         map[string]string  `json:"env,omitempty" jsonschema:"environment variables of every command in the sandbox"`
	Labels      map[string]string  `json:"labels,omitempty" jsonschema:"labels to find the sandbox by (list_sandboxes)"`
	Network     string             `json:"network,omitempty" jsonschema:"egress mode: none, deny_all, baseline (package registries only; the default), allowlist or unrestricted"`
	Allow       []string           `json:"allow,omitempty" jsonschema:"egress rules HOST[:PORT][/METHODS] (HOST may be *.domain); implies allowlist"`
	IdleSuspend string             `json:"idle_suspend,omitempty" jsonschema:"suspend after this long without calls, as a duration such as 30m (default 10m)"`
	MaxLifetime string             `json:"max_lifetime,omitempty" jsonschema:"terminate this long after the start, such as 8h (default 8h)"`
	TTL         string             `json:"ttl,omitempty" jsonschema:"terminate after this long suspended, such as 168h (default 168h)"`
	Role        string             `json:"role,omitempty" jsonschema:"the one role the sandbox acts with, one you hold (default: all of yours)"`
	Workspace   string             `json:"workspace,omitempty" jsonschema:"absolute path of a project directory of this machine, yours, to mount at /workspace as it is (no copy); only when the server runs over stdio"`
	ReadOnly    bool               `json:"workspace_read_only,omitempty" jsonschema:"mount the workspace read-only"`
	Volumes     []VolumeMountInput `json:"volumes,omitempty" jsonschema:"your volumes to attach (create_volume)"`
}

// SandboxRef names one sandbox.
type SandboxRef struct {
	Sandbox string `json:"sandbox" jsonschema:"name or id of the sandbox"`
}

// ListSandboxesInput filters list_sandboxes.
type ListSandboxesInput struct {
	States            []string          `json:"states,omitempty" jsonschema:"only sandboxes in one of these states (default: all but terminated)"`
	Labels            map[string]string `json:"labels,omitempty" jsonschema:"only sandboxes carrying every one of these labels"`
	IncludeTerminated bool              `json:"include_terminated,omitempty" jsonschema:"also list terminated sandboxes (tombstones) when states is empty"`
}

// SnapshotInput is the input of snapshot.
type SnapshotInput struct {
	Sandbox string            `json:"sandbox" jsonschema:"name or id of the sandbox to snapshot (running or suspended)"`
	Labels  map[string]string `json:"labels,omitempty" jsonschema:"labels of the snapshot"`
	Memory  bool              `json:"memory,omitempty" jsonschema:"keep the running sandbox's memory and processes too (runsc only; refused with the reason elsewhere): a fork of the snapshot runs on from that point"`
}

// ForkInput is the input of fork.
type ForkInput struct {
	Source string            `json:"source" jsonschema:"what to fork: a sandbox's name or id, or a snapshot id (snap_...)"`
	Name   string            `json:"name" jsonschema:"name of the new sandbox"`
	Labels map[string]string `json:"labels,omitempty" jsonschema:"labels of the new sandbox"`
}

// SandboxInfo is what the tools say about a sandbox.
type SandboxInfo struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	State       string            `json:"state" jsonschema:"creating, running, suspending, suspended, resuming, terminating, terminated, failed or lost"`
	Image       string            `json:"image"`
	Generation  int64             `json:"generation" jsonschema:"grows by one with every fresh container (start, resume, restore)"`
	Version     int64             `json:"version"`
	Network     string            `json:"network" jsonschema:"egress mode"`
	CreatedAt   time.Time         `json:"created_at"`
	ExpiresAt   time.Time         `json:"expires_at,omitzero"`
	IdleSuspend string            `json:"idle_suspend,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Failure     string            `json:"failure,omitempty"`
	Parent      string            `json:"parent,omitempty" jsonschema:"the snapshot it was restored or forked from"`
	ForkedFrom  string            `json:"forked_from,omitempty"`
}

// SandboxOutput answers a call that changed one sandbox.
type SandboxOutput struct {
	Operation string      `json:"operation" jsonschema:"the durable operation's id"`
	Sandbox   SandboxInfo `json:"sandbox"`
}

// ListSandboxesOutput is the caller's sandboxes.
type ListSandboxesOutput struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// SnapshotInfo is what the tools say about a snapshot.
type SnapshotInfo struct {
	ID          string    `json:"id" jsonschema:"the snapshot's id, which fork takes as source"`
	SandboxID   string    `json:"sandbox_id"`
	State       string    `json:"state"`
	Consistency string    `json:"consistency"`
	LogicalSize int64     `json:"logical_size"`
	StoredSize  int64     `json:"stored_size"`
	Files       int       `json:"files"`
	Created     time.Time `json:"created"`
	MemoryBytes int64     `json:"memory_bytes,omitempty" jsonschema:"the size of the snapshot's memory image, when it keeps memory"`
}

// SnapshotOutput answers snapshot.
type SnapshotOutput struct {
	Operation string       `json:"operation"`
	Snapshot  SnapshotInfo `json:"snapshot"`
}

var (
	networkModes  = []any{"none", "deny_all", "baseline", "allowlist", "unrestricted"}
	sandboxStates = []any{api.StateCreating, api.StateRunning, api.StateSuspending, api.StateSuspended,
		api.StateResuming, api.StateTerminating, api.StateTerminated, api.StateFailed, api.StateLost}
)

func (t *tools) addLifecycleTools(r *registry) {
	notDestructive := func(idempotent bool) *mcpsdk.ToolAnnotations {
		return &mcpsdk.ToolAnnotations{DestructiveHint: boolPtr(false), IdempotentHint: idempotent, OpenWorldHint: boolPtr(false)}
	}
	add(r, &mcpsdk.Tool{
		Name:  "create_sandbox",
		Title: "Create a sandbox",
		Description: "Create a durable, named, isolated sandbox and wait until it runs. It keeps its files across calls " +
			"and suspends by itself when idle; any call resumes it. Terminate it when done.",
		Annotations: notDestructive(false),
	}, func(s *jsonschema.Schema) {
		setEnum(s, "network", networkModes...)
		setPattern(s, "name", `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	}, t.createSandbox)
	add(r, &mcpsdk.Tool{
		Name:        "list_sandboxes",
		Title:       "List sandboxes",
		Description: "List your sandboxes: name, id, state, image and generation (terminated ones only when asked).",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, func(s *jsonschema.Schema) {
		if p := s.Properties["states"]; p != nil && p.Items != nil {
			p.Items.Enum = sandboxStates
		}
	}, t.listSandboxes)
	add(r, &mcpsdk.Tool{
		Name:  "suspend",
		Title: "Suspend a sandbox",
		Description: "Stop a sandbox's processes but keep it: files outside /tmp, /run and /dev/shm stay, memory does not. " +
			"Any later call (or resume) starts it again.",
		Annotations: notDestructive(true),
	}, nil, t.lifecycle("suspended", (*client.Client).Suspend))
	add(r, &mcpsdk.Tool{
		Name:        "resume",
		Title:       "Resume a sandbox",
		Description: "Start a suspended sandbox again in a fresh container (generation + 1); its kept files are back, no process is.",
		Annotations: notDestructive(true),
	}, nil, t.lifecycle("resumed", (*client.Client).Resume))
	add(r, &mcpsdk.Tool{
		Name:        "terminate",
		Title:       "Terminate a sandbox",
		Description: "End a sandbox for good and delete its files; its name remains as a terminated tombstone. This cannot be undone.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: boolPtr(true), IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, nil, t.lifecycle("terminated", (*client.Client).Terminate))
	add(r, &mcpsdk.Tool{
		Name:  "snapshot",
		Title: "Snapshot a sandbox",
		Description: "Take an immutable snapshot of a sandbox's files (not its processes, nor /tmp). " +
			"fork starts a new sandbox from it.",
		Annotations: notDestructive(false),
	}, nil, t.snapshot)
	add(r, &mcpsdk.Tool{
		Name:        "fork",
		Title:       "Fork a sandbox",
		Description: "Create a new sandbox with a copy of another sandbox's files, or of a snapshot's.",
		Annotations: notDestructive(false),
	}, func(s *jsonschema.Schema) {
		setPattern(s, "name", `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	}, t.fork)
}

func (t *tools) createSandbox(ctx context.Context, _ *mcpsdk.CallToolRequest, in CreateSandboxInput) (*mcpsdk.CallToolResult, SandboxOutput, error) {
	if in.Name == "" {
		return nil, SandboxOutput{}, invalidf("name is empty")
	}
	if in.CPU < 0 || in.MemoryMB < 0 {
		return nil, SandboxOutput{}, invalidf("cpu and memory_mb must not be negative")
	}
	req := api.CreateSandboxRequest{Name: in.Name, Image: in.Image, Env: in.Env, Labels: in.Labels,
		Limits:      api.Limits{CPU: in.CPU, Memory: in.MemoryMB << 20},
		IdleSuspend: in.IdleSuspend, MaxLifetime: in.MaxLifetime, TTL: in.TTL, Role: in.Role, Volumes: volumeMounts(in.Volumes)}
	if in.Workspace != "" {
		switch {
		case !t.opts.HostWorkspaces:
			return nil, SandboxOutput{}, invalidf("workspace is offered only when airlock mcp runs over stdio, as a process of your own")
		case !filepath.IsAbs(in.Workspace):
			return nil, SandboxOutput{}, invalidf("workspace %q must be an absolute path", in.Workspace)
		}
		req.Workspace = &api.Workspace{Path: filepath.Clean(in.Workspace), Access: "rw"}
		if in.ReadOnly {
			req.Workspace.Access = "ro"
		}
	}
	if in.Network != "" || len(in.Allow) > 0 {
		req.Network = &api.NetworkPolicy{Mode: in.Network, Allow: in.Allow}
		if req.Network.Mode == "" {
			req.Network.Mode = "allowlist"
		}
	}
	resp, err := t.cl.Create(ctx, req)
	return sandboxAnswer("created", resp, err)
}

func (t *tools) listSandboxes(ctx context.Context, _ *mcpsdk.CallToolRequest, in ListSandboxesInput) (*mcpsdk.CallToolResult, ListSandboxesOutput, error) {
	for _, s := range in.States {
		if !slices.Contains(sandboxStates, any(s)) {
			return nil, ListSandboxesOutput{}, invalidf("state %q is not a sandbox state", s)
		}
	}
	list, err := t.cl.List(ctx, client.ListOptions{States: in.States, Labels: in.Labels})
	if err != nil {
		return nil, ListSandboxesOutput{}, err
	}
	out := ListSandboxesOutput{Sandboxes: []SandboxInfo{}}
	var b strings.Builder
	for _, sb := range list {
		if len(in.States) == 0 && !in.IncludeTerminated && sb.State == api.StateTerminated {
			continue
		}
		info := sandboxInfo(&sb)
		out.Sandboxes = append(out.Sandboxes, info)
		fmt.Fprintf(&b, "%s (%s): %s, image %s, generation %d\n", info.Name, info.ID, info.State, info.Image, info.Generation)
	}
	if len(out.Sandboxes) == 0 {
		b.WriteString("no sandboxes\n")
	}
	return textResult(b.String()), out, nil
}

// lifecycleCall is a client method that moves one sandbox.
type lifecycleCall func(*client.Client, context.Context, string, ...client.CallOption) (*api.OperationResponse, error)

func (t *tools) lifecycle(done string, call lifecycleCall) mcpsdk.ToolHandlerFor[SandboxRef, SandboxOutput] {
	return func(ctx context.Context, _ *mcpsdk.CallToolRequest, in SandboxRef) (*mcpsdk.CallToolResult, SandboxOutput, error) {
		if err := needSandbox(in.Sandbox); err != nil {
			return nil, SandboxOutput{}, err
		}
		resp, err := call(t.cl, ctx, in.Sandbox)
		return sandboxAnswer(done, resp, err)
	}
}

func (t *tools) snapshot(ctx context.Context, _ *mcpsdk.CallToolRequest, in SnapshotInput) (*mcpsdk.CallToolResult, SnapshotOutput, error) {
	if err := needSandbox(in.Sandbox); err != nil {
		return nil, SnapshotOutput{}, err
	}
	resp, err := t.cl.SnapshotWith(ctx, in.Sandbox, api.SnapshotRequest{Labels: in.Labels, Memory: in.Memory})
	if err != nil {
		return nil, SnapshotOutput{}, err
	}
	if resp.Snapshot == nil {
		return nil, SnapshotOutput{}, fmt.Errorf("the daemon answered operation %s (%s) without a snapshot", resp.Operation.ID, resp.Operation.State)
	}
	s := resp.Snapshot
	out := SnapshotOutput{Operation: resp.Operation.ID, Snapshot: SnapshotInfo{ID: s.ID, SandboxID: s.SandboxID, State: s.State,
		Consistency: s.Consistency, LogicalSize: s.LogicalSize, StoredSize: s.StoredSize, Files: s.Files, Created: s.Created}}
	memory := ""
	if s.Memory != nil {
		out.Snapshot.MemoryBytes = s.Memory.Bytes
		memory = fmt.Sprintf(", memory image %d bytes", s.Memory.Bytes)
	}
	text := fmt.Sprintf("snapshot %s of sandbox %s: %s, %s, %d files, %d bytes%s (fork it with source=%s)",
		s.ID, in.Sandbox, s.State, s.Consistency, s.Files, s.LogicalSize, memory, s.ID)
	return textResult(text), out, nil
}

func (t *tools) fork(ctx context.Context, _ *mcpsdk.CallToolRequest, in ForkInput) (*mcpsdk.CallToolResult, SandboxOutput, error) {
	if strings.TrimSpace(in.Source) == "" {
		return nil, SandboxOutput{}, invalidf("source is empty: give a sandbox's name or id, or a snapshot id")
	}
	if in.Name == "" {
		return nil, SandboxOutput{}, invalidf("name is empty")
	}
	resp, err := t.cl.Fork(ctx, in.Source, api.ForkRequest{Name: in.Name, Labels: in.Labels})
	return sandboxAnswer("forked from "+in.Source, resp, err)
}

// sandboxAnswer turns the answer of a call that moved a sandbox into the tool's.
func sandboxAnswer(done string, resp *api.OperationResponse, err error) (*mcpsdk.CallToolResult, SandboxOutput, error) {
	if err != nil {
		return nil, SandboxOutput{}, err
	}
	if resp.Operation.Error != nil {
		return nil, SandboxOutput{}, fmt.Errorf("operation %s failed: %s (%s)", resp.Operation.ID, resp.Operation.Error.Message, resp.Operation.Error.Code)
	}
	if resp.Sandbox == nil {
		return nil, SandboxOutput{}, fmt.Errorf("the daemon answered operation %s (%s) without the sandbox", resp.Operation.ID, resp.Operation.State)
	}
	out := SandboxOutput{Operation: resp.Operation.ID, Sandbox: sandboxInfo(resp.Sandbox)}
	sb := out.Sandbox
	if sb.State == api.StateFailed {
		return nil, SandboxOutput{}, fmt.Errorf("sandbox %s (%s) failed: %s; it still exists until terminated", sb.Name, sb.ID, sb.Failure)
	}
	text := fmt.Sprintf("sandbox %s (%s) %s: state %s, image %s, generation %d, network %s",
		sb.Name, sb.ID, done, sb.State, sb.Image, sb.Generation, sb.Network)
	return textResult(text), out, nil
}

func sandboxInfo(sb *api.Sandbox) SandboxInfo {
	return SandboxInfo{ID: sb.ID, Name: sb.Name, State: sb.State, Image: sb.Image, Generation: sb.Generation,
		Version: sb.Version, Network: sb.Network.Mode, CreatedAt: sb.CreatedAt, ExpiresAt: sb.ExpiresAt,
		IdleSuspend: sb.IdleSuspend, Labels: sb.Labels, Failure: sb.Failure, Parent: sb.Parent, ForkedFrom: sb.ForkedFrom}
}

func textResult(text string) *mcpsdk.CallToolResult {
	return &mcpsdk.CallToolResult{Content: []mcpsdk.Content{&mcpsdk.TextContent{Text: text}}}
}

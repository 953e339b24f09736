package mcp

import (
	"context"
	"fmt"
	"strings"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/api"
)

// VolumeMountInput attaches a volume to a sandbox create_sandbox makes.
type VolumeMountInput struct {
	Name     string `json:"name" jsonschema:"the volume's name (create_volume)"`
	Path     string `json:"path" jsonschema:"where the sandbox sees it: an absolute path such as /data"`
	ReadOnly bool   `json:"read_only,omitempty" jsonschema:"attach it read-only (a volume has one writer at a time, any number of readers)"`
}

// CreateVolumeInput is the input of create_volume.
type CreateVolumeInput struct {
	Name   string `json:"name" jsonschema:"the volume's name, unique among yours"`
	SizeMB int64  `json:"size_mb" jsonschema:"capacity in MiB (at least 16); writes past it get ENOSPC inside"`
}

// VolumeInfo is what the tools say about a volume.
type VolumeInfo struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"`
	Size     int64    `json:"size" jsonschema:"capacity in bytes"`
	Attached []string `json:"attached,omitempty" jsonschema:"the sandboxes (ids) it is attached to, with path and access"`
}

// ListVolumesInput is the input of list_volumes.
type ListVolumesInput struct {
	Snapshots bool `json:"snapshots,omitempty" jsonschema:"list your volume snapshots instead of your volumes"`
}

// ListVolumesOutput is the caller's volumes.
type ListVolumesOutput struct {
	Volumes []VolumeInfo `json:"volumes"`
}

func volumeInfo(v *api.Volume) VolumeInfo {
	out := VolumeInfo{ID: v.ID, Name: v.Name, Size: v.Size}
	for _, a := range v.Attachments {
		access := "rw"
		if a.ReadOnly {
			access = "ro"
		}
		out.Attached = append(out.Attached, a.Sandbox+":"+a.Path+":"+access)
	}
	return out
}

func (t *tools) addVolumeTools(r *registry) {
	add(r, &mcpsdk.Tool{
		Name:  "create_volume",
		Title: "Create a volume",
		Description: "Create a volume: an encrypted filesystem of its own that outlives sandboxes (suspend, resume, terminate). " +
			"Attach it with create_sandbox's volumes.",
		Annotations: &mcpsdk.ToolAnnotations{DestructiveHint: boolPtr(false), OpenWorldHint: boolPtr(false)},
	}, nil, t.createVolume)
	add(r, &mcpsdk.Tool{
		Name:        "list_volumes",
		Title:       "List volumes",
		Description: "List your volumes: name, id, capacity and the sandboxes they are attached to.",
		Annotations: &mcpsdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, nil, t.listVolumes)
}

func (t *tools) createVolume(ctx context.Context, _ *mcpsdk.CallToolRequest, in CreateVolumeInput) (*mcpsdk.CallToolResult, VolumeInfo, error) {
	if in.Name == "" || in.SizeMB <= 0 {
		return nil, VolumeInfo{}, invalidf("name and a positive size_mb are required")
	}
	v, err := t.cl.CreateVolume(ctx, api.CreateVolumeRequest{Name: in.Name, Size: in.SizeMB << 20})
	if err != nil {
		return nil, VolumeInfo{}, err
	}
	return textResult(fmt.Sprintf("volume %s (%s) created: %d bytes", v.Name, v.ID, v.Size)), volumeInfo(v), nil
}

func (t *tools) listVolumes(ctx context.Context, _ *mcpsdk.CallToolRequest, in ListVolumesInput) (*mcpsdk.CallToolResult, ListVolumesOutput, error) {
	kind := ""
	if in.Snapshots {
		kind = "snapshot"
	}
	list, err := t.cl.Volumes(ctx, kind)
	if err != nil {
		return nil, ListVolumesOutput{}, err
	}
	out := ListVolumesOutput{Volumes: []VolumeInfo{}}
	var b strings.Builder
	for i := range list {
		info := volumeInfo(&list[i])
		out.Volumes = append(out.Volumes, info)
		fmt.Fprintf(&b, "%s (%s): %d bytes, attached to %d sandboxes\n", info.Name, info.ID, info.Size, len(info.Attached))
	}
	if len(list) == 0 {
		b.WriteString("no volumes\n")
	}
	return textResult(b.String()), out, nil
}

// volumeMounts turns create_sandbox's volumes into the API's.
func volumeMounts(in []VolumeMountInput) []api.VolumeMount {
	var out []api.VolumeMount
	for _, v := range in {
		out = append(out, api.VolumeMount{Name: v.Name, Path: v.Path, ReadOnly: v.ReadOnly})
	}
	return out
}

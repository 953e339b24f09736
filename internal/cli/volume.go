package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/airlockhq/airlock/api"
)

var volumeCreateVerb = &verb{
	name:  "volume create",
	args:  "NAME --size SIZE [--from VSNAP]",
	short: "make a volume: an encrypted filesystem of its own that outlives sandboxes",
	long: `A volume is a hard-capacity ext4 filesystem (writes past it get ENOSPC inside), encrypted
on the node's disk, attached to sandboxes with create --volume NAME:/PATH[:ro] or volume
attach. --from starts it with a volume snapshot's contents (checked first).`,
	run: runVolumeCreate,
}

var volumeLsVerb = &verb{
	name:  "volume ls",
	args:  "[--snapshots]",
	short: "list volumes (or volume snapshots)",
	run:   runVolumeLs,
}

var volumeGetVerb = &verb{
	name:  "volume get",
	args:  "NAME",
	short: "show a volume and the sandboxes it is attached to",
	run:   runVolumeGet,
}

var volumeResizeVerb = &verb{
	name:  "volume resize",
	args:  "NAME --size SIZE",
	short: "grow a volume (it never shrinks)",
	long: `The volume grows in place while sandboxes use it where the node can resize a mounted
filesystem; otherwise grow_to shows the size it takes at its next mount that no running
sandbox holds (suspend its sandboxes and resume them).`,
	run: runVolumeResize,
}

var volumeRmVerb = &verb{
	name:  "volume rm",
	args:  "NAME|VSNAP --yes",
	short: "remove a volume (refused while attached) or a volume snapshot",
	run:   runVolumeRm,
}

var volumeSnapshotVerb = &verb{
	name:  "volume snapshot",
	args:  "NAME",
	short: "copy a volume to a checksummed volume snapshot (volume create --from uses it)",
	run:   runVolumeSnapshot,
}

var volumeAttachVerb = &verb{
	name:  "volume attach",
	args:  "NAME --sandbox SB --path /PATH [--ro]",
	short: "attach a volume to a suspended sandbox (one writer at a time)",
	run:   runVolumeAttach,
}

var volumeDetachVerb = &verb{
	name:  "volume detach",
	args:  "NAME --sandbox SB",
	short: "detach a volume from a suspended sandbox",
	run:   runVolumeDetach,
}

func runVolumeCreate(c *cmd, args []string) error {
	var size sizeFlag
	c.fs.Var(&size, "size", "capacity `SIZE` (10G)")
	from := c.fs.String("from", "", "start with volume snapshot `VSNAP`'s contents")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if size == 0 && *from == "" {
		return usagef("--size is required (such as --size 10G)")
	}
	v, err := cl.CreateVolume(c.ctx, api.CreateVolumeRequest{Name: pos[0], Size: int64(size), From: *from})
	if err != nil {
		return err
	}
	return c.printVolume(v)
}

func runVolumeLs(c *cmd, args []string) error {
	snaps := c.fs.Bool("snapshots", false, "list volume snapshots instead")
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	kind := "volume"
	if *snaps {
		kind = "snapshot"
	}
	list, err := cl.Volumes(c.ctx, kind)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(list)
	}
	return printVolumes(c.stdout, list)
}

func runVolumeGet(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	v, err := cl.GetVolume(c.ctx, pos[0])
	if err != nil {
		return err
	}
	return c.printVolume(v)
}

func runVolumeResize(c *cmd, args []string) error {
	var size sizeFlag
	c.fs.Var(&size, "size", "new capacity `SIZE` (20G)")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if size == 0 {
		return usagef("--size is required (such as --size 20G)")
	}
	v, err := cl.ResizeVolume(c.ctx, pos[0], int64(size))
	if err != nil {
		return err
	}
	return c.printVolume(v)
}

func runVolumeRm(c *cmd, args []string) error {
	yes := c.fs.Bool("yes", false, "remove it: its data is gone for good")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if !*yes {
		return usagef("removing volume %s deletes its data for good: add --yes", pos[0])
	}
	if err := cl.DeleteVolume(c.ctx, pos[0]); err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(map[string]string{"deleted": pos[0]})
	}
	_, err = fmt.Fprintf(safeWriter{c.stdout}, "deleted %s\n", pos[0])
	return err
}

func runVolumeSnapshot(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	v, err := cl.SnapshotVolume(c.ctx, pos[0])
	if err != nil {
		return err
	}
	return c.printVolume(v)
}

func runVolumeAttach(c *cmd, args []string) error {
	sb := c.fs.String("sandbox", "", "the suspended sandbox `SB`")
	path := c.fs.String("path", "", "where the sandbox sees it: an absolute `PATH`")
	ro := c.fs.Bool("ro", false, "read-only")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *sb == "" || *path == "" {
		return usagef("--sandbox and --path are required")
	}
	out, err := cl.AttachVolume(c.ctx, pos[0], api.AttachVolumeRequest{Sandbox: *sb, Path: *path, ReadOnly: *ro})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(out)
	}
	_, err = fmt.Fprintf(safeWriter{c.stdout}, "attached %s to %s at %s\n", pos[0], out.Name, *path)
	return err
}

func runVolumeDetach(c *cmd, args []string) error {
	sb := c.fs.String("sandbox", "", "the suspended sandbox `SB`")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *sb == "" {
		return usagef("--sandbox is required")
	}
	out, err := cl.DetachVolume(c.ctx, pos[0], *sb)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(out)
	}
	_, err = fmt.Fprintf(safeWriter{c.stdout}, "detached %s from %s\n", pos[0], out.Name)
	return err
}

func (c *cmd) printVolume(v *api.Volume) error {
	if c.json() {
		return c.printJSON(v)
	}
	var att []string
	for _, a := range v.Attachments {
		mode := "rw"
		if a.ReadOnly {
			mode = "ro"
		}
		att = append(att, a.Sandbox+":"+a.Path+":"+mode)
	}
	fields := [][2]string{{"id", v.ID}, {"name", v.Name}, {"kind", v.Kind}, {"size", formatSize(v.Size)}}
	if v.GrowTo > 0 {
		fields = append(fields, [2]string{"grow_to", formatSize(v.GrowTo) + " (at its next mount that no running sandbox holds)"})
	}
	fields = append(fields, [2]string{"node", v.Node}, [2]string{"source", orNone(v.Source)},
		[2]string{"attached", orNone(strings.Join(att, " "))}, [2]string{"created", formatTime(v.CreatedAt)})
	if v.Checksum != "" {
		fields = append(fields, [2]string{"checksum", v.Checksum})
	}
	return printFields(c.stdout, fields)
}

func printVolumes(w io.Writer, list []api.Volume) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tID\tSIZE\tATTACHED\tCREATED")
	for _, v := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", v.Name, v.ID, formatSize(v.Size), len(v.Attachments), formatAge(v.CreatedAt))
	}
	return tw.Flush()
}

// volumeFlag reads --volume NAME:/PATH[:ro|:rw].
func volumeFlag(vals []string) ([]api.VolumeMount, error) {
	var out []api.VolumeMount
	for _, v := range vals {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return nil, usagef("--volume %s: want NAME:/PATH or NAME:/PATH:ro", v)
		}
		m := api.VolumeMount{Name: parts[0], Path: parts[1]}
		if len(parts) == 3 {
			switch parts[2] {
			case "ro":
				m.ReadOnly = true
			case "rw":
			default:
				return nil, usagef("--volume %s: the access is ro or rw, not %q", v, parts[2])
			}
		}
		out = append(out, m)
	}
	return out, nil
}

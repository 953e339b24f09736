package cli

import (
	"fmt"
	"io"
	"strconv"

	"github.com/airlockhq/airlock/api"
)

var snapshotCreateVerb = &verb{
	name:  "snapshot create",
	args:  "NAME [--label K=V]... [--idempotency-key K]",
	short: "snapshot a sandbox's writable layer (frozen while it runs)",
	run:   runSnapshotCreate,
}

var snapshotLsVerb = &verb{
	name:  "snapshot ls",
	args:  "[NAME]",
	short: "list snapshots, of one sandbox or all",
	run:   runSnapshotLs,
}

var snapshotGetVerb = &verb{
	name:  "snapshot get",
	args:  "ID",
	short: "show a snapshot's manifest",
	run:   runSnapshotGet,
}

var snapshotRmVerb = &verb{
	name:  "snapshot rm",
	args:  "ID",
	short: "delete a snapshot (refused while a sandbox depends on it)",
	run:   runSnapshotRm,
}

var restoreVerb = &verb{
	name:  "restore",
	args:  "NAME SNAPSHOT [-v] [--no-safety-snapshot] [--idempotency-key K]",
	short: "replace a suspended sandbox's files with a snapshot's",
	long: `The sandbox must be suspended. The snapshot's checksums and image are checked first,
and a safety snapshot of the current state is taken unless --no-safety-snapshot; its id
is printed, with the command that undoes the restore. -v prints the operation too.`,
	run: runRestore,
}

var forkVerb = &verb{
	name:  "fork",
	args:  "SRC NEW [--label K=V]... [--volume NAME:/PATH[:ro]]... [--idempotency-key K]",
	short: "make a new sandbox from a sandbox or a snapshot (snap_…)",
	long: `The new sandbox shares no writable storage with its source; its lineage is recorded.
It gets none of its source's volumes: --volume attaches one (a volume has one writer).`,
	run: runFork,
}

func runSnapshotCreate(c *cmd, args []string) error {
	labels := kvFlag{}
	c.fs.Var(labels, "label", "label `K=V` (repeatable)")
	key := c.fs.String("idempotency-key", "", "idempotency key `K`")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	opts := c.callOpts(*key, 0)
	resp, err := cl.Snapshot(c.ctx, pos[0], labels.orNil(), opts...)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	return printSnapshots(c.stdout, []api.Snapshot{*resp.Snapshot}, newSandboxNames(c, cl).name)
}

func runSnapshotLs(c *cmd, args []string) error {
	ref, cl, err := c.connectOptional(args)
	if err != nil {
		return err
	}
	list, err := cl.Snapshots(c.ctx, ref)
	if err != nil {
		return err
	}
	if c.json() {
		if list == nil {
			list = []api.Snapshot{}
		}
		return c.printJSON(list)
	}
	return printSnapshots(c.stdout, list, newSandboxNames(c, cl).name)
}

func runSnapshotGet(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	s, err := cl.GetSnapshot(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(s)
	}
	return printFields(c.stdout, [][2]string{
		{"id", s.ID}, {"sandbox", sandboxAndID(newSandboxNames(c, cl).name, s.SandboxID)}, {"image", s.ImageDigest}, {"parent", orNone(s.Parent)},
		{"state", s.State}, {"consistency", s.Consistency}, {"logical_size", formatSize(s.LogicalSize)},
		{"stored_size", formatSize(s.StoredSize)}, {"files", strconv.Itoa(s.Files)},
		{"chunks", strconv.Itoa(len(s.Chunks))}, {"created", formatTime(s.Created)}, {"labels", formatMap(s.Labels)},
	})
}

func runSnapshotRm(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if err := cl.DeleteSnapshot(c.ctx, pos[0]); err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(map[string]string{"deleted": pos[0]})
	}
	_, err = fmt.Fprintf(c.stdout, "deleted %s\n", pos[0])
	return err
}

func runRestore(c *cmd, args []string) error {
	noSafety := c.fs.Bool("no-safety-snapshot", false, "do not snapshot the current state first")
	key := c.fs.String("idempotency-key", "", "idempotency key `K`")
	verbose := c.verboseFlag("print the operation")
	pos, cl, err := c.connect(args, 2)
	if err != nil {
		return err
	}
	opts := c.callOpts(*key, 0)
	resp, err := cl.Restore(c.ctx, pos[0], api.RestoreRequest{Snapshot: pos[1], NoSafetySnapshot: *noSafety}, opts...)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	if *verbose || resp.Operation.State != "succeeded" {
		if err := printOperation(c.stdout, &resp.Operation, resp.Sandbox); err != nil {
			return err
		}
	} else if _, err := fmt.Fprintf(safeWriter{c.stdout}, "restored %s from %s\n", pos[0], pos[1]); err != nil {
		return err
	}
	if s := resp.Snapshot; s != nil {
		_, err = fmt.Fprintf(c.stdout, "safety snapshot %s keeps the state before the restore (airlock restore %s %s undoes it)\n", s.ID, pos[0], s.ID)
	}
	return err
}

func runFork(c *cmd, args []string) error {
	labels := kvFlag{}
	c.fs.Var(labels, "label", "label `K=V` (repeatable)")
	key := c.fs.String("idempotency-key", "", "idempotency key `K`")
	var vols repeatFlag
	c.fs.Var(&vols, "volume", "attach volume `NAME:/PATH[:ro]` (repeatable)")
	pos, cl, err := c.connect(args, 2)
	if err != nil {
		return err
	}
	mounts, err := volumeFlag(vols)
	if err != nil {
		return err
	}
	opts := c.callOpts(*key, 0)
	resp, err := cl.Fork(c.ctx, pos[0], api.ForkRequest{Name: pos[1], Labels: labels.orNil(), Volumes: mounts}, opts...)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	return printSandboxRow(c.stdout, resp.Sandbox)
}

// sandboxAndID is "name (id)", or the id alone when its name is unknown.
func sandboxAndID(name func(string) string, id string) string {
	if n := name(id); n != "" && n != id {
		return n + " (" + id + ")"
	}
	return id
}

func printSnapshots(w io.Writer, list []api.Snapshot, name func(id string) string) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSANDBOX\tSTATE\tCONSISTENCY\tSIZE\tSTORED\tCREATED")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, name(s.SandboxID), s.State, s.Consistency,
			formatSize(s.LogicalSize), formatSize(s.StoredSize), formatAge(s.Created))
	}
	return tw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

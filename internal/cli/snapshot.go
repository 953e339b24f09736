package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
)

var snapshotCreateVerb = &verb{
	name:  "snapshot create",
	args:  "NAME [--memory] [--label K=V]... [--idempotency-key K]",
	short: "snapshot a sandbox's writable layer (frozen while it runs)",
	long: `--memory keeps a running runsc sandbox's memory and processes too: a fork of the
snapshot runs on from that point. It is refused, with the reason, under runc, for a
sandbox that is not running, and for one with a secret delivered by file or env (a
memory image never holds a secret's value). The memory image's size is listed.`,
	run: runSnapshotCreate,
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
is printed, with the command that undoes the restore. -v prints the operation too.
A snapshot taken with --memory gives a runsc sandbox its memory too: its resume runs
its processes on from the snapshot's point.`,
	run: runRestore,
}

var forkVerb = &verb{
	name:  "fork",
	args:  "SRC NEW [--count N] [--label K=V]... [--volume NAME:/PATH[:ro]]... [--idempotency-key K]",
	short: "make a new sandbox from a sandbox or a snapshot (snap_…)",
	long: `The new sandbox shares no writable storage with its source; its lineage is recorded.
It gets none of its source's volumes: --volume attaches one (a volume has one writer).
Under runsc a running sandbox is forked with its memory: the new sandbox's processes
run on from the point of the fork (so does a fork of a snapshot taken with --memory),
with its own name, id, session credential file, network address and egress policy.
What was in memory is the same in every clone: its hostname, environment, random
seeds and ids made before the fork, a token already read, a cached address, TLS
sessions; the credential file itself is each sandbox's own, so read it anew. Under
runc, for a sandbox with a secret delivered by file or env, and where volumes are
attached to the source or the fork, the fork keeps files only, and its events say why
(memory_not_kept).
--count N makes N sandboxes, NEW-1 … NEW-N, all from one point: a sandbox is first
snapshotted (with its memory where it can be kept), and each is a fork of that
snapshot. A volume has one writer, so --count and --volume do not go together.`,
	run: runFork,
}

func runSnapshotCreate(c *cmd, args []string) error {
	labels := kvFlag{}
	c.fs.Var(labels, "label", "label `K=V` (repeatable)")
	memory := c.fs.Bool("memory", false, "keep the sandbox's memory and processes too (runsc)")
	key := c.fs.String("idempotency-key", "", "idempotency key `K`")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	opts := c.callOpts(*key, 0)
	resp, err := cl.SnapshotWith(c.ctx, pos[0], api.SnapshotRequest{Labels: labels.orNil(), Memory: *memory}, opts...)
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
		{"chunks", strconv.Itoa(len(s.Chunks))}, {"memory", snapshotMemoryFiles(s)}, {"created", formatTime(s.Created)}, {"labels", formatMap(s.Labels)},
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
	count := c.fs.Int("count", 0, "make `N` sandboxes, NEW-1 … NEW-N, from one point")
	pos, cl, err := c.connect(args, 2)
	if err != nil {
		return err
	}
	mounts, err := volumeFlag(vols)
	if err != nil {
		return err
	}
	if !c.isSet("count") {
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
	if *count < 1 || *count > maxForkCount {
		return usagef("--count must be 1 to %d, not %d", maxForkCount, *count)
	}
	if len(mounts) > 0 {
		return usagef("--count and --volume do not go together: a volume has one writer")
	}
	src := pos[0]
	if !strings.HasPrefix(src, "snap_") {
		src, err = forkPoint(c, cl, src, *key)
		if err != nil {
			return err
		}
	}
	var made []api.Sandbox
	for i := 1; i <= *count; i++ {
		name := fmt.Sprintf("%s-%d", pos[1], i)
		resp, err := cl.Fork(c.ctx, src, api.ForkRequest{Name: name, Labels: labels.orNil()}, c.callOpts(keyFor(*key, name), 0)...)
		if err != nil {
			return fmt.Errorf("fork %s (%d of %d made): %w", name, len(made), *count, err)
		}
		made = append(made, *resp.Sandbox)
	}
	if c.json() {
		return c.printJSON(made)
	}
	for i := range made {
		if err := printSandboxRow(c.stdout, &made[i]); err != nil {
			return err
		}
	}
	return nil
}

// keyFor derives the idempotency key of one call of several from the one given ("":
// none).
func keyFor(key, part string) string {
	if key == "" {
		return ""
	}
	return key + "/" + part
}

// maxForkCount bounds fork --count.
const maxForkCount = 64

// forkPoint snapshots sandbox ref for a fork into several clones, with its memory
// where it can be kept (else files only, as a fork says), and returns the snapshot.
func forkPoint(c *cmd, cl *client.Client, ref, key string) (string, error) {
	opts := c.callOpts(keyFor(key, "snapshot"), 0)
	labels := map[string]string{"airlock.fork": "count"}
	resp, err := cl.SnapshotWith(c.ctx, ref, api.SnapshotRequest{Labels: labels, Memory: true}, opts...)
	var ae *client.Error
	if errors.As(err, &ae) && errors.Is(err, errdefs.ErrFailedPrecondition) {
		fmt.Fprintf(c.stderr, "forking files only: %s\n", ae.Message)
		resp, err = cl.SnapshotWith(c.ctx, ref, api.SnapshotRequest{Labels: labels}, opts...)
	}
	if err != nil {
		return "", err
	}
	return resp.Snapshot.ID, nil
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
	fmt.Fprintln(tw, "ID\tSANDBOX\tSTATE\tCONSISTENCY\tSIZE\tSTORED\tMEMORY\tCREATED")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, name(s.SandboxID), s.State, s.Consistency,
			formatSize(s.LogicalSize), formatSize(s.StoredSize), snapshotMemory(s), formatAge(s.Created))
	}
	return tw.Flush()
}

// snapshotMemoryFiles is a snapshot's memory image with its files' checksums.
func snapshotMemoryFiles(s *api.Snapshot) string {
	if s.Memory == nil {
		return "none (files only)"
	}
	out := formatSize(s.Memory.Bytes) + " image"
	for _, f := range s.Memory.Files {
		out += fmt.Sprintf("; %s %s sha256:%s", f.Name, formatSize(f.Size), f.SHA256)
	}
	return out
}

// snapshotMemory is a snapshot's memory image as listed: its size on disk, "-" when
// it keeps files only.
func snapshotMemory(s api.Snapshot) string {
	if s.Memory == nil {
		return "-"
	}
	return formatSize(s.Memory.Bytes)
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

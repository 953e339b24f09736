package secret

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// Delivery hands bound secrets to running sandboxes: files on a tmpfs of its own
// (never under the state directory, so never in a snapshot, fork or copy of a
// sandbox's layers), variables for each execution, and the substitutions the egress
// proxy makes. It keeps what it delivered per running sandbox in memory, and beside
// the sandbox's files on the tmpfs the versions it pinned (pins.json), which a
// restarted daemon reads back for a sandbox still running.
type Delivery struct {
	svc   *Service
	dir   string
	names *bindsource.Names // a sandbox's directory is named for its id by a keyed hash
	log   *slog.Logger
	fake  bool // NewFakeDelivery's: a plain directory, files left the caller's

	mu   sync.Mutex
	live map[string]*liveSandbox
}

// liveSandbox is what one running sandbox was given.
type liveSandbox struct {
	owner  string
	bound  []Bound           // its bindings, as of the last start or change
	pinned map[string]int    // secret name -> the version a sandbox-scoped binding delivers
	files  map[string]string // binding id -> the host file behind its mount
	subs   []egress.Substitution
	// values says a secret's value (a file or env delivery) may have been given to
	// the container since it started: its processes may hold it after its binding is
	// unbound or its secret revoked, so it is never cleared until the container stops.
	values bool
}

// pinnedGone says whether a secret pinned for a container is bound to it no more.
func pinnedGone(pinned map[string]int, bound []Bound) bool {
	for name := range pinned {
		if !slices.ContainsFunc(bound, func(b Bound) bool { return b.Secret == name }) {
			return true
		}
	}
	return false
}

// givesValues says whether any of bound may put a secret's value inside a sandbox (with
// revoked, counting the revoked ones too).
func givesValues(bound []Bound, revoked bool) bool {
	return slices.ContainsFunc(bound, func(b Bound) bool {
		return b.Binding.Delivery != DeliverProxy && (revoked || !b.Revoked)
	})
}

// Mount puts a delivered file at its target in a sandbox, read-only.
type Mount struct{ Source, Destination string }

// tmpfsSize bounds the delivery tmpfs: 64 bindings a sandbox of under 64 KiB each
// for a few hundred sandboxes; a write past it fails the start that needed it.
const tmpfsSize = "256m"

// NewDelivery delivers svc's secrets, with files under dir, which it makes a tmpfs
// (root only; a tmpfs already there, from an earlier start, is kept, with the files
// running sandboxes have mounted).
func NewDelivery(svc *Service, dir string, log *slog.Logger) (*Delivery, error) {
	return newDelivery(svc, dir, log, false)
}

// NewFakeDelivery is NewDelivery without its host part, for tests that run without
// root: the files go to dir as it is (no tmpfs of its own) and stay the caller's, not
// the sandbox's root's. What is delivered, to which execution and proxy, is the same.
// A node never uses it: its secrets would rest on whatever disk dir is on.
func NewFakeDelivery(svc *Service, dir string, log *slog.Logger) (*Delivery, error) {
	return newDelivery(svc, dir, log, true)
}

func newDelivery(svc *Service, dir string, log *slog.Logger, fake bool) (*Delivery, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// A tmpfs of its own, not one it happens to be on (/run is one): private, sized,
	// nosuid and nodev. Not noexec: a sandbox's read-only bind of a file from it must be
	// able to keep every flag the mount has, and its runtime sets nosuid and nodev only.
	if !fake {
		if err := bindsource.Tmpfs(dir, "mode=0711,size="+tmpfsSize); err != nil {
			return nil, err
		}
	}
	names, err := bindsource.OpenNames(dir)
	if err != nil {
		return nil, err
	}
	d := &Delivery{svc: svc, dir: dir, names: names, log: log.With("component", "secrets"), live: map[string]*liveSandbox{}, fake: fake}
	svc.mu.Lock()
	svc.onChange = d.refresh
	svc.mu.Unlock()
	return d, nil
}

// sandboxDir holds sandbox's delivered files. Its name is all a sandbox's mount table
// shows of where a file comes from: it says nothing of the sandbox.
func (d *Delivery) sandboxDir(sandbox string) string {
	return filepath.Join(d.dir, d.names.Name(sandbox))
}

// Unmount removes the delivery tmpfs (for tests and a node's removal; a daemon that
// stops leaves it for the sandboxes that run on).
func Unmount(dir string) error { return bindsource.Unmount(dir) }

// Start readies a sandbox's secrets as it starts: it writes the files of file
// deliveries and of placeholders bound to paths, pins the version sandbox-scoped
// bindings deliver (the newest of each), and returns the mounts that put the files at
// their targets. uid is the host uid of the sandbox's root.
func (d *Delivery) Start(ctx context.Context, owner, sandbox string, uid uint32) ([]Mount, error) {
	return d.start(ctx, owner, sandbox, uid, false)
}

// Resume is Start for a sandbox a restarted daemon finds running: the versions it was
// given when it started are kept (they are recorded beside its files, on the tmpfs that
// outlives the daemon), and only a binding made since gets the newest.
func (d *Delivery) Resume(ctx context.Context, owner, sandbox string, uid uint32) ([]Mount, error) {
	return d.start(ctx, owner, sandbox, uid, true)
}

// pinsFile holds, in a sandbox's directory of the tmpfs, the versions its
// sandbox-scoped bindings deliver. The directory is root's; only the files bound at
// targets are mounted into the sandbox.
const pinsFile = "pins.json"

// loadPins reads the versions recorded for sandbox; none when there are none.
func (d *Delivery) loadPins(sandbox string) map[string]int {
	pins := map[string]int{}
	b, err := os.ReadFile(filepath.Join(d.sandboxDir(sandbox), pinsFile))
	if err == nil {
		if err := json.Unmarshal(b, &pins); err != nil {
			d.log.Warn("the recorded secret versions of a sandbox do not decode; the newest are delivered", "sandbox", sandbox, "err", err)
			pins = map[string]int{}
		}
	}
	return pins
}

// savePins records the versions sandbox's sandbox-scoped bindings deliver; with none,
// it removes the record (and makes no directory: most sandboxes have no secrets).
func (d *Delivery) savePins(sandbox string, pins map[string]int) error {
	dir := d.sandboxDir(sandbox)
	if len(pins) == 0 {
		if err := os.Remove(filepath.Join(dir, pinsFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(pins)
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, pinsFile), b, 0o600) // a temporary name of its own for each writer
}

func (d *Delivery) start(ctx context.Context, owner, sandbox string, uid uint32, running bool) ([]Mount, error) {
	// Files are rewritten in place, never removed first: after a restart of the daemon
	// the running sandbox's mounts still hold them, and a later revocation must empty
	// the very files it sees.
	d.mu.Lock()
	delete(d.live, sandbox)
	d.mu.Unlock()
	bound, err := d.svc.BindingsOf(ctx, owner, sandbox)
	if err != nil {
		return nil, err
	}
	// A sandbox with no binding yet is kept too: a binding made while it runs reaches
	// the proxy at once.
	ls := &liveSandbox{owner: owner, pinned: map[string]int{}, files: map[string]string{}}
	if running {
		ls.pinned = d.loadPins(sandbox)
	}
	var mounts []Mount
	for _, b := range bound {
		if b.Revoked {
			continue
		}
		if _, ok := ls.pinned[b.Secret]; !ok {
			sec, err := d.svc.Get(ctx, owner, b.Secret)
			if err != nil {
				return nil, err
			}
			ls.pinned[b.Secret] = sec.Versions[len(sec.Versions)-1].Version
		}
		if b.Binding.Target[0] != '/' {
			continue
		}
		file, err := d.writeFile(ctx, owner, sandbox, b, ls.pinned[b.Secret], uid)
		if err != nil {
			return nil, err
		}
		ls.files[b.Binding.ID] = file
		mounts = append(mounts, Mount{Source: file, Destination: b.Binding.Target})
	}
	if err := d.savePins(sandbox, ls.pinned); err != nil {
		return nil, fmt.Errorf("record the delivered secret versions: %w", err)
	}
	ls.bound = bound
	// A container a restarted daemon finds running may have been given a value before
	// its secret was revoked, or by a binding removed since (its pin stays; how it was
	// delivered is not known, so it counts as a value).
	ls.values = givesValues(bound, running) || running && pinnedGone(ls.pinned, bound)
	ls.subs = d.substitutions(owner, sandbox, ls.pinned, bound)
	d.mu.Lock()
	d.live[sandbox] = ls
	d.mu.Unlock()
	return mounts, nil
}

// writeFile writes the file of a binding to a path (the value of a file delivery at
// version, or a placeholder) on the tmpfs and returns its path.
func (d *Delivery) writeFile(ctx context.Context, owner, sandbox string, b Bound, version int, uid uint32) (string, error) {
	var body []byte
	if b.Binding.Delivery == DeliverFile {
		var err error
		if body, err = d.svc.Value(ctx, owner, b.Secret, version); err != nil {
			return "", err
		}
	} else {
		body = []byte(d.svc.Placeholder(owner, b.Secret, sandbox) + "\n")
	}
	defer clear(body)
	dir := d.sandboxDir(sandbox)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	file := filepath.Join(dir, b.Binding.ID)
	if err := writeOwned(file, body, uid, !d.fake); err != nil {
		return "", fmt.Errorf("deliver secret %q: %w", b.Secret, err)
	}
	return file, nil
}

// Deliver writes the file of a binding to a path made while its sandbox runs, and
// returns the mount that puts it at its target; the caller makes the mount in the
// running sandbox. ok is false when the sandbox is not running here or the binding is
// gone (or its secret revoked) meanwhile. A later revocation or unbinding empties the
// file in place, as it does the files of a start.
func (d *Delivery) Deliver(ctx context.Context, owner, sandbox, binding string, uid uint32) (m Mount, ok bool, err error) {
	d.mu.Lock()
	ls, live := d.live[sandbox]
	var (
		b       Bound
		found   bool
		version int
	)
	if live {
		for _, x := range ls.bound {
			if x.Binding.ID == binding && !x.Revoked {
				b, found, version = x, true, ls.pinned[x.Secret]
			}
		}
	}
	d.mu.Unlock()
	if !found || b.Binding.Target[0] != '/' {
		return Mount{}, false, nil
	}
	file, err := d.writeFile(ctx, owner, sandbox, b, version, uid)
	if err != nil {
		return Mount{}, false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	still := slices.ContainsFunc(ls.bound, func(x Bound) bool { return x.Binding.ID == binding && !x.Revoked })
	if cur, ok := d.live[sandbox]; !ok || cur != ls || !still {
		os.Truncate(file, 0) // stopped, restarted, unbound or revoked meanwhile
		return Mount{}, false, nil
	}
	ls.files[binding] = file
	return Mount{Source: file, Destination: b.Binding.Target}, true, nil
}

// writeOwned writes a delivered file in place (a mounted file keeps its inode), owned
// by the sandbox's root (unless chown is false) and readable by the sandbox's users.
func writeOwned(file string, body []byte, uid uint32, chown bool) error {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		return err
	}
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && chown {
		err = os.Chown(file, int(uid), int(uid))
	}
	return err
}

// Stop forgets a sandbox that stopped and removes its files.
func (d *Delivery) Stop(sandbox string) {
	d.mu.Lock()
	delete(d.live, sandbox)
	d.mu.Unlock()
	os.RemoveAll(d.sandboxDir(sandbox))
}

// Substitutions is what the proxy substitutes for a sandbox; it is called per request.
func (d *Delivery) Substitutions(sandbox string) []egress.Substitution {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ls, ok := d.live[sandbox]; ok {
		return ls.subs
	}
	return nil
}

func (d *Delivery) substitutions(owner, sandbox string, pinned map[string]int, bound []Bound) []egress.Substitution {
	var subs []egress.Substitution
	for _, b := range bound {
		// A revoked secret's placeholder stays known, so that the proxy refuses (and
		// audits) a request that carries it instead of sending it on as it is.
		if b.Binding.Delivery != DeliverProxy {
			continue
		}
		name, version := b.Secret, 0
		if b.Binding.Scope == ScopeSandbox {
			version = pinned[name]
		}
		subs = append(subs, egress.Substitution{
			Secret: name, Placeholder: d.svc.Placeholder(owner, name, sandbox), Hosts: b.Binding.Hosts, Query: b.Binding.Query,
			Headers: b.Binding.Headers,
			Value:   func() ([]byte, error) { return d.svc.Value(context.Background(), owner, name, version) },
		})
	}
	return subs
}

// DeliversValues says whether sandbox has a binding that puts a secret's value itself
// inside it (a file or env delivery, not revoked), or, running, was given one since its
// container started (unbound or revoked since): its processes' memory may then hold
// the value. Proxy deliveries put only placeholders there.
func (d *Delivery) DeliversValues(ctx context.Context, owner, sandbox string) (bool, error) {
	d.mu.Lock()
	ls, live := d.live[sandbox]
	given := live && ls.values
	d.mu.Unlock()
	if given {
		return true, nil
	}
	bound, err := d.svc.BindingsOf(ctx, owner, sandbox)
	if err != nil {
		return false, err
	}
	return givesValues(bound, false), nil
}

// ExecEnv is the variables one execution in a sandbox gets from its bindings: the
// placeholders of proxy deliveries bound to variables, and the values of env
// deliveries (a sandbox-scoped one at the version the sandbox started with).
// A running sandbox's bindings are known (kept current by refresh), so an execution
// reads the store only for the values of env deliveries.
func (d *Delivery) ExecEnv(ctx context.Context, owner, sandbox string) ([]string, error) {
	var (
		bound  []Bound
		pinned map[string]int
	)
	d.mu.Lock()
	ls, live := d.live[sandbox]
	if live {
		bound, pinned = ls.bound, maps.Clone(ls.pinned)
	}
	d.mu.Unlock()
	if !live {
		var err error
		if bound, err = d.svc.BindingsOf(ctx, owner, sandbox); err != nil {
			return nil, err
		}
	}
	var env []string
	for _, b := range bound {
		if b.Binding.Target[0] == '/' || b.Revoked && b.Binding.Delivery != DeliverProxy {
			continue // a revoked secret's placeholder is still given: the proxy refuses it
		}
		switch b.Binding.Delivery {
		case DeliverProxy:
			env = append(env, b.Binding.Target+"="+d.svc.Placeholder(owner, b.Secret, sandbox))
		case DeliverEnv:
			version := 0
			if b.Binding.Scope == ScopeSandbox {
				version = pinned[b.Secret]
			}
			v, err := d.svc.Value(ctx, owner, b.Secret, version)
			if errors.Is(err, errdefs.ErrFailedPrecondition) {
				continue // expired: nothing to deliver
			}
			if err != nil {
				return nil, fmt.Errorf("deliver secret %q: %w", b.Secret, err)
			}
			env = append(env, b.Binding.Target+"="+string(v))
			clear(v)
		}
	}
	return env, nil
}

// refresh follows a change of owner's bindings or secrets (sandbox "" for every one
// of owner's running sandboxes): the proxy's substitutions are rebuilt at once, and
// the file of a binding that is gone, or of a revoked secret, is emptied in place.
func (d *Delivery) refresh(owner, sandbox string) {
	ctx := context.Background()
	d.mu.Lock()
	pinned := map[string]map[string]int{} // sandbox -> its pins, read before the store is
	for id, ls := range d.live {
		if ls.owner == owner && (sandbox == "" || sandbox == id) {
			pinned[id] = maps.Clone(ls.pinned)
		}
	}
	d.mu.Unlock()
	for id, pins := range pinned {
		bound, err := d.svc.BindingsOf(ctx, owner, id)
		if err != nil {
			d.log.Warn("refresh a sandbox's secrets", "sandbox", id, "err", err)
			continue
		}
		keep := map[string]bool{}
		for _, b := range bound {
			keep[b.Binding.ID] = !b.Revoked
			if _, ok := pins[b.Secret]; !ok && !b.Revoked { // a new binding: pin the newest
				if sec, err := d.svc.Get(ctx, owner, b.Secret); err == nil {
					pins[b.Secret] = sec.Versions[len(sec.Versions)-1].Version
				}
			}
		}
		subs := d.substitutions(owner, id, pins, bound)
		d.mu.Lock()
		if ls, ok := d.live[id]; ok {
			if err := d.savePins(id, pins); err != nil {
				d.log.Warn("record a sandbox's secret versions", "sandbox", id, "err", err)
			}
			for bid, file := range ls.files {
				if !keep[bid] {
					os.Truncate(file, 0) // in place: the sandbox's mount sees it at once
					delete(ls.files, bid)
				}
			}
			ls.bound, ls.pinned, ls.subs = bound, pins, subs
			ls.values = ls.values || givesValues(bound, false)
		}
		d.mu.Unlock()
	}
}

// The binding record, named here for the HTTP edge.
type Binding = store.SecretBinding

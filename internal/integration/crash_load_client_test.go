package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// loadClient is one of TestCrashUnderLoad's clients: it works on sandboxes of its own
// and records what the daemon acknowledged, to check after the last restart.
type loadClient struct {
	c      *client.Client
	n      int
	rng    *rand.Rand
	refs   []string
	full   *atomic.Bool
	secret string
	seq    int

	sandboxes []*loadSandbox // every one it tried to make
	snaps     []loadSnapshot
	binds     []loadBinding
	images    map[string]string // ref -> digest of an acknowledged pull
	ops       []string          // acknowledged operations

	acked, failed int
	kinds         map[string]int // acknowledged calls by kind
	fullErrs      []string       // the errors of calls made while the disk was full
}

// loadSandbox is what a client knows of one of its sandboxes.
type loadSandbox struct {
	name, id string
	// created: the create (or fork) was acknowledged.
	created bool
	// markers are lines that acknowledged execs appended to /root/acks and synced (or
	// that the sandbox it was forked from held when the fork was acknowledged). A write
	// not synced is not acknowledged: the sandbox's disk is a sparse image on the state
	// disk, and a full state disk can lose what is still in its page cache.
	markers []string
	// want is the state the last call on it left it in, "" when that call's outcome
	// is unknown.
	want string
	// rmTried: a terminate was sent; rmAcked: it was acknowledged.
	rmTried, rmAcked bool
}

type loadSnapshot struct {
	id, sandboxID string
	markers       []string
}

type loadBinding struct{ id, sandbox string }

func newLoadClient(t *testing.T, c *client.Client, n int, refs []string, full *atomic.Bool) *loadClient {
	t.Helper()
	lc := &loadClient{c: c, n: n, rng: rand.New(rand.NewPCG(uint64(n), uint64(time.Now().UnixNano()))), refs: refs, full: full,
		secret: fmt.Sprintf("load-%d", n), images: map[string]string{}, kinds: map[string]int{}}
	if _, err := c.CreateSecret(background, api.CreateSecretRequest{Name: lc.secret, Type: "token",
		AllowedHosts: []string{"api.example.test"}, Value: "v" + randHex(8)}); err != nil {
		t.Fatal(err)
	}
	return lc
}

// live lists the sandboxes that exist for sure and were not sent a terminate.
func (lc *loadClient) live() []*loadSandbox {
	var out []*loadSandbox
	for _, sb := range lc.sandboxes {
		if sb.created && !sb.rmTried {
			out = append(out, sb)
		}
	}
	return out
}

func (lc *loadClient) loop(ctx context.Context) {
	for ctx.Err() == nil {
		if lc.removeUnknown(ctx) {
			continue
		}
		live := lc.live()
		pick := lc.rng.IntN(100)
		var sb *loadSandbox
		if len(live) > 0 {
			sb = live[lc.rng.IntN(len(live))]
		}
		var kind string
		var err error
		switch {
		case sb == nil || (pick < 8 && len(live) < 3):
			kind, err = "create", lc.create(ctx)
		case pick < 35:
			kind, err = "exec", lc.exec(ctx, sb)
		case pick < 45:
			kind, err = "suspend", lc.lifecycle(ctx, sb, "suspend")
		case pick < 55:
			kind, err = "resume", lc.lifecycle(ctx, sb, "resume")
		case pick < 63 && len(live) < 3:
			kind, err = "fork", lc.fork(ctx, sb)
		case pick < 73:
			kind, err = "snapshot", lc.snapshot(ctx, sb)
		case pick < 81 && len(live) > 1:
			kind, err = "rm", lc.lifecycle(ctx, sb, "rm")
		case pick < 90:
			kind, err = "pull", lc.pull(ctx)
		default:
			kind, err = "bind", lc.bind(ctx, sb)
		}
		if err == nil {
			lc.acked++
			lc.kinds[kind]++
			continue
		}
		lc.failed++
		if lc.full.Load() {
			lc.fullErrs = append(lc.fullErrs, kind+": "+errorClass(err))
		}
		if errors.Is(err, errdefs.ErrUnavailable) {
			time.Sleep(100 * time.Millisecond) // the daemon is down; it will be back
		}
	}
}

// removeUnknown sends a terminate again to one sandbox whose create, fork or
// terminate had an unknown outcome, if there is one, so that those do not pile up past
// the node's capacity (each running one holds a network link); it reports whether it
// tried.
func (lc *loadClient) removeUnknown(ctx context.Context) bool {
	for _, sb := range lc.sandboxes {
		if (sb.created && !sb.rmTried) || sb.rmAcked {
			continue
		}
		sb.rmTried = true
		ctx, cancel := call(ctx)
		defer cancel()
		resp, err := lc.c.Terminate(ctx, sb.name)
		if err == nil && sb.created {
			err = lc.opOK(resp, err)
		}
		switch {
		case err == nil:
			sb.rmAcked, sb.want = true, api.StateTerminated
		case !sb.created && errors.Is(err, errdefs.ErrNotFound):
			sb.rmAcked = true // never made
		default:
			time.Sleep(100 * time.Millisecond) // the daemon is down, or the sandbox busy
		}
		return true
	}
	return false
}

// call bounds one call; its context ends with the run's, when the result is unknown.
func call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 90*time.Second)
}

// opOK is nil when the call was acknowledged: no error and an operation that succeeded.
func (lc *loadClient) opOK(resp *api.OperationResponse, err error) error {
	if err != nil {
		return err
	}
	if resp.Operation.State != "succeeded" {
		return fmt.Errorf("operation %s is %s", resp.Operation.ID, resp.Operation.State)
	}
	lc.ops = append(lc.ops, resp.Operation.ID)
	return nil
}

func (lc *loadClient) name() string {
	lc.seq++
	return fmt.Sprintf("load%d-%d", lc.n, lc.seq)
}

func (lc *loadClient) create(ctx context.Context) error {
	sb := &loadSandbox{name: lc.name()}
	lc.sandboxes = append(lc.sandboxes, sb)
	ctx, cancel := call(ctx)
	defer cancel()
	resp, err := lc.c.Create(ctx, api.CreateSandboxRequest{Name: sb.name})
	if err = lc.opOK(resp, err); err != nil {
		return err
	}
	sb.id, sb.created, sb.want = resp.Sandbox.ID, true, api.StateRunning
	return nil
}

func (lc *loadClient) exec(ctx context.Context, sb *loadSandbox) error {
	lc.seq++
	marker := fmt.Sprintf("m%d-%d", lc.n, lc.seq)
	sb.want = ""
	ctx, cancel := call(ctx)
	defer cancel()
	res, err := lc.c.Exec(ctx, sb.name, api.ExecRequest{Shell: "echo " + marker + " >> /root/acks && sync /root/acks", Timeout: "30s"})
	if err != nil {
		return err
	}
	if res.State != api.ExecSucceeded || res.ExitCode != 0 {
		return fmt.Errorf("exec: %s exit %d: %s%s", res.State, res.ExitCode, res.Error, res.Stderr)
	}
	sb.markers = append(sb.markers, marker+"@"+time.Now().Format("05.000"))
	sb.want = api.StateRunning
	return nil
}

func (lc *loadClient) lifecycle(ctx context.Context, sb *loadSandbox, verb string) error {
	sb.want = ""
	ctx, cancel := call(ctx)
	defer cancel()
	var resp *api.OperationResponse
	var err error
	want := api.StateRunning
	switch verb {
	case "suspend":
		resp, err = lc.c.Suspend(ctx, sb.name)
		want = api.StateSuspended
	case "resume":
		resp, err = lc.c.Resume(ctx, sb.name)
	case "rm":
		sb.rmTried = true
		resp, err = lc.c.Terminate(ctx, sb.name)
		want = api.StateTerminated
	}
	if err = lc.opOK(resp, err); err != nil {
		return err
	}
	sb.want, sb.rmAcked = want, verb == "rm"
	return nil
}

func (lc *loadClient) fork(ctx context.Context, src *loadSandbox) error {
	from, markers := src.name, src.markers
	if len(lc.snaps) > 0 && lc.rng.IntN(3) == 0 {
		s := lc.snaps[lc.rng.IntN(len(lc.snaps))]
		from, markers = s.id, s.markers
	}
	sb := &loadSandbox{name: lc.name()}
	lc.sandboxes = append(lc.sandboxes, sb)
	ctx, cancel := call(ctx)
	defer cancel()
	resp, err := lc.c.Fork(ctx, from, api.ForkRequest{Name: sb.name})
	if err = lc.opOK(resp, err); err != nil {
		return err
	}
	sb.id, sb.created, sb.want, sb.markers = resp.Sandbox.ID, true, api.StateRunning, slices.Clone(markers)
	return nil
}

func (lc *loadClient) snapshot(ctx context.Context, sb *loadSandbox) error {
	markers, was := slices.Clone(sb.markers), sb.want
	sb.want = ""
	ctx, cancel := call(ctx)
	defer cancel()
	resp, err := lc.c.Snapshot(ctx, sb.name, nil)
	if err = lc.opOK(resp, err); err != nil {
		return err
	}
	if resp.Snapshot == nil {
		return fmt.Errorf("snapshot operation %s succeeded with no snapshot", resp.Operation.ID)
	}
	lc.snaps = append(lc.snaps, loadSnapshot{id: resp.Snapshot.ID, sandboxID: sb.id, markers: markers})
	sb.want = was
	return nil
}

func (lc *loadClient) pull(ctx context.Context) error {
	ref := lc.refs[lc.rng.IntN(len(lc.refs))]
	ctx, cancel := call(ctx)
	defer cancel()
	img, err := lc.c.PullImage(ctx, api.PullRequest{Ref: ref}, nil)
	if err != nil {
		return err
	}
	lc.images[ref] = img.Digest
	return nil
}

func (lc *loadClient) bind(ctx context.Context, sb *loadSandbox) error {
	lc.seq++
	ctx, cancel := call(ctx)
	defer cancel()
	res, err := lc.c.BindSecret(ctx, lc.secret, api.BindSecretRequest{Sandbox: sb.name, Target: fmt.Sprintf("TOKEN_%d", lc.seq)})
	if err != nil {
		return err
	}
	lc.binds = append(lc.binds, loadBinding{id: res.Binding.ID, sandbox: sb.id})
	return nil
}

// errorClass is an error's API code and message (or its text) without the names and
// ids that make every one different.
func errorClass(err error) string {
	msg := err.Error()
	var ce *client.Error
	if errors.As(err, &ce) {
		msg = ce.Code + ": " + ce.Message
	}
	return errorIDs.ReplaceAllString(msg, "…")
}

// errorIDs matches what differs between errors of one kind: sandbox names, operation,
// request and sandbox ids, loop devices, temporary names, socket paths and sizes.
var errorIDs = regexp.MustCompile(`"load[0-9-]+"|\b(op|req|sb|snap)_[0-9a-z]+|loop[0-9]+|[^ ]*\.sock|\.tmp-[0-9]+|\b[0-9.]+[KMGT]?i?B\b`)

// check compares what the client was acknowledged with what the daemon holds after
// recovery; byID is every sandbox the daemon lists.
func (lc *loadClient) check(t *testing.T, byID map[string]api.Sandbox, events func(id string) string) {
	t.Helper()
	for _, m := range lc.sandboxes {
		if !m.created {
			continue
		}
		sb, ok := byID[m.id]
		if !ok {
			t.Errorf("%s (%s): acknowledged, and gone after recovery", m.name, m.id)
			continue
		}
		switch {
		case m.rmAcked && sb.State != api.StateTerminated:
			t.Errorf("%s: its terminate was acknowledged, and it is %s", m.name, sb.State)
		case !m.rmTried && sb.State == api.StateTerminated:
			t.Errorf("%s: never sent a terminate, and it is terminated (%s)", m.name, sb.Failure)
		case m.want != "" && sb.State != m.want:
			t.Errorf("%s: the last call on it was acknowledged leaving it %s, and it is %s", m.name, m.want, sb.State)
		}
		if sb.State == api.StateTerminated || len(m.markers) == 0 {
			continue
		}
		res, err := lc.c.Exec(background, m.name, api.ExecRequest{Shell: "cat /root/acks", Timeout: execTimeout})
		if err != nil || res.ExitCode != 0 {
			t.Errorf("%s: read its acknowledged writes: %v %+v; its events:\n%s", m.name, err, res, events(m.id))
			continue
		}
		have := strings.Fields(res.Stdout)
		var lost []string
		for _, mk := range m.markers {
			if !slices.Contains(have, strings.Split(mk, "@")[0]) {
				lost = append(lost, mk)
			}
		}
		if len(lost) > 0 {
			t.Errorf("%s: acknowledged writes %v are lost (the file holds %v, acknowledged %v); its events:\n%s", m.name, lost, have, m.markers, events(m.id))
		}
	}
	for _, id := range lc.ops {
		op, err := lc.c.Operation(background, id)
		if err != nil || op.State != "succeeded" {
			t.Errorf("acknowledged operation %s: %+v, %v; want succeeded", id, op, err)
		}
	}
	for _, s := range lc.snaps {
		got, err := lc.c.GetSnapshot(background, s.id)
		if err != nil || got.State != "ready" || got.SandboxID != s.sandboxID {
			t.Errorf("acknowledged snapshot %s of %s: %+v, %v; want it ready", s.id, s.sandboxID, got, err)
		}
	}
	imgs, err := lc.c.Images(background)
	if err != nil {
		t.Fatal(err)
	}
	for ref, digest := range lc.images {
		if !slices.ContainsFunc(imgs, func(i api.Image) bool { return i.Name == ref && i.Digest == digest }) {
			t.Errorf("acknowledged pull of %s (%s) is not listed", ref, digest)
		}
	}
	sec, err := lc.c.Secret(background, lc.secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range lc.binds {
		if sb, ok := byID[b.sandbox]; !ok || sb.State == api.StateTerminated {
			continue
		}
		if !slices.ContainsFunc(sec.Bindings, func(sb api.SecretBinding) bool { return sb.ID == b.id }) {
			t.Errorf("acknowledged binding %s of %s to %s is gone", b.id, lc.secret, b.sandbox)
		}
	}
}

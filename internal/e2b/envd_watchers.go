package e2b

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/filesystempb"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Bounds of the polled watchers.
const (
	maxWatchersPerSandbox = 64
	maxWatcherEvents      = 4096    // events a watcher keeps between polls
	maxWatcherBytes       = 4 << 20 // and their size, encoded
	// What the watchers of one sandbox, and of the whole node, keep at once: a sandbox
	// whose files churn cannot pin more of the daemon's memory than this.
	maxSandboxWatcherBytes = 8 << 20
	maxNodeWatcherBytes    = 64 << 20
)

// watcherIdle is how long a polled watcher lives without a poll (a variable for tests).
var watcherIdle = 10 * time.Minute

// watcherRegistry holds the polled watchers of every sandbox, each bound to its sandbox
// and owner. Its zero value is ready. It owns the goroutine that feeds each watcher;
// close removes every watcher and waits for them.
type watcherRegistry struct {
	mu         sync.Mutex
	byID       map[string]*watcher
	perSandbox map[string]int // watchers, and reserved places, by sandbox id
	closed     bool
	wg         sync.WaitGroup

	budgetMu  sync.Mutex
	nodeBytes int64            // bytes every watcher keeps
	sboxBytes map[string]int64 // and by sandbox
	nodeLimit int64            // maxNodeWatcherBytes (a field for tests)
	sboxLimit int64            // maxSandboxWatcherBytes
}

// take counts size more bytes kept for sandbox, if the sandbox's and the node's
// budgets have room.
func (r *watcherRegistry) take(sandbox string, size int) bool {
	r.budgetMu.Lock()
	defer r.budgetMu.Unlock()
	nodeLimit, sboxLimit := r.nodeLimit, r.sboxLimit
	if nodeLimit == 0 {
		nodeLimit, sboxLimit = maxNodeWatcherBytes, maxSandboxWatcherBytes
	}
	if r.nodeBytes+int64(size) > nodeLimit || r.sboxBytes[sandbox]+int64(size) > sboxLimit {
		return false
	}
	if r.sboxBytes == nil {
		r.sboxBytes = map[string]int64{}
	}
	r.nodeBytes += int64(size)
	r.sboxBytes[sandbox] += int64(size)
	return true
}

// give returns size bytes take counted for sandbox.
func (r *watcherRegistry) give(sandbox string, size int) {
	if size == 0 {
		return
	}
	r.budgetMu.Lock()
	defer r.budgetMu.Unlock()
	r.nodeBytes -= int64(size)
	if r.sboxBytes[sandbox] -= int64(size); r.sboxBytes[sandbox] <= 0 {
		delete(r.sboxBytes, sandbox)
	}
}

// watcher is one polled watch: the agent's watch feeds a bounded buffer that polls
// drain. Past its bounds the oldest events are dropped, and counted.
type watcher struct {
	id, sandbox, owner string
	reg                *watcherRegistry // whose budgets its events count against
	src                watchSource
	cancel             context.CancelFunc
	idle               *time.Timer

	mu      sync.Mutex
	ring    []*filesystempb.FilesystemEvent // maxWatcherEvents places; n from head on
	head, n int
	bytes   int
	lost    int
	ended   bool
	err     error // why the watch ended, if not normally
	removed bool  // its events have been given back; it keeps no more
}

// reserve takes one of sandbox's places for a watcher, or says the sandbox has none left.
func (r *watcherRegistry) reserve(sandbox string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errdefs.Unavailable("the node is shutting down")
	}
	if r.perSandbox[sandbox] >= maxWatchersPerSandbox {
		return errdefs.Quota("the sandbox has %d watchers, the most it may have; remove one (RemoveWatcher) first", maxWatchersPerSandbox)
	}
	if r.perSandbox == nil {
		r.perSandbox = map[string]int{}
	}
	r.perSandbox[sandbox]++
	return nil
}

// release gives back a place reserve took.
func (r *watcherRegistry) release(sandbox string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releaseLocked(sandbox)
}

func (r *watcherRegistry) releaseLocked(sandbox string) {
	if r.perSandbox[sandbox]--; r.perSandbox[sandbox] <= 0 {
		delete(r.perSandbox, sandbox)
	}
}

// add registers a watcher of sandbox and owner in a place reserve took, fed by src
// through convert (nil events are skipped), and returns its id. cancel ends what src
// depends on; it is called when the watcher is removed.
func (r *watcherRegistry) add(sandbox, owner string, src watchSource, cancel context.CancelFunc, convert func(agentproto.WatchEvent) *filesystempb.FilesystemEvent) string {
	w := &watcher{id: rand.Text(), sandbox: sandbox, owner: owner, reg: r, src: src, cancel: cancel,
		ring: make([]*filesystempb.FilesystemEvent, maxWatcherEvents)}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string]*watcher{}
	}
	r.byID[w.id] = w
	w.idle = time.AfterFunc(watcherIdle, func() { r.remove(w) })
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			ev, err := src.Next()
			if err != nil {
				w.end(err)
				return
			}
			if fe := convert(ev); fe != nil {
				w.push(fe)
			}
		}
	}()
	return w.id
}

// get returns watcher id if it watches sandbox for owner.
func (r *watcherRegistry) get(sandbox, owner, id string) (*watcher, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.byID[id]
	if w == nil || w.sandbox != sandbox || w.owner != owner {
		return nil, errdefs.NotFound("the sandbox has no such watcher: it was removed, its watch ended, or it was not polled for %s", watcherIdle)
	}
	return w, nil
}

// poll drains watcher id's events and says how many were dropped since the last poll.
// A watcher whose watch has ended is removed once it has nothing left to tell.
func (r *watcherRegistry) poll(sandbox, owner, id string) ([]*filesystempb.FilesystemEvent, int, error) {
	w, err := r.get(sandbox, owner, id)
	if err != nil {
		return nil, 0, err
	}
	w.idle.Reset(watcherIdle)
	events, lost, ended, werr := w.drain()
	if ended && len(events) == 0 && lost == 0 {
		r.remove(w)
		if werr != nil {
			return nil, 0, errdefs.Unavailable("the watch ended: %s", errdefs.Message(agentErr(werr)))
		}
	}
	return events, lost, nil
}

// removeID removes watcher id if it watches sandbox for owner.
func (r *watcherRegistry) removeID(sandbox, owner, id string) error {
	w, err := r.get(sandbox, owner, id)
	if err != nil {
		return err
	}
	r.remove(w)
	return nil
}

// remove ends w's watch and forgets w; its feeding goroutine ends with the watch.
func (r *watcherRegistry) remove(w *watcher) {
	r.mu.Lock()
	if r.byID[w.id] != w {
		r.mu.Unlock()
		return // removed already
	}
	delete(r.byID, w.id)
	r.releaseLocked(w.sandbox)
	r.mu.Unlock()
	w.idle.Stop()
	w.cancel()
	w.src.Close()
	w.mu.Lock()
	w.removed = true
	r.give(w.sandbox, w.bytes)
	clear(w.ring)
	w.head, w.n, w.bytes = 0, 0, 0
	w.mu.Unlock()
}

// close removes every watcher, refuses new ones and waits for their goroutines.
func (r *watcherRegistry) close() {
	r.mu.Lock()
	r.closed = true
	all := make([]*watcher, 0, len(r.byID))
	for _, w := range r.byID {
		all = append(all, w)
	}
	r.mu.Unlock()
	for _, w := range all {
		r.remove(w)
	}
	r.wg.Wait()
}

// push keeps fe, dropping the oldest events while the watcher's buffer is full or its
// sandbox's or the node's budget has no room; with nothing left to drop, fe itself is
// dropped. Every drop is counted.
func (w *watcher) push(fe *filesystempb.FilesystemEvent) {
	size := proto.Size(fe)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed {
		return
	}
	for {
		if w.n < len(w.ring) && w.bytes+size <= maxWatcherBytes && w.reg.take(w.sandbox, size) {
			break
		}
		if w.n == 0 {
			w.lost++
			return
		}
		old := proto.Size(w.ring[w.head])
		w.bytes -= old
		w.reg.give(w.sandbox, old)
		w.ring[w.head] = nil
		w.head = (w.head + 1) % len(w.ring)
		w.n--
		w.lost++
	}
	w.ring[(w.head+w.n)%len(w.ring)] = fe
	w.n++
	w.bytes += size
}

// drain takes the kept events, oldest first, and the count of those dropped, and says
// whether (and why) the watch has ended.
func (w *watcher) drain() (events []*filesystempb.FilesystemEvent, lost int, ended bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	events = make([]*filesystempb.FilesystemEvent, w.n)
	for i := range events {
		j := (w.head + i) % len(w.ring)
		events[i], w.ring[j] = w.ring[j], nil
	}
	lost = w.lost
	w.reg.give(w.sandbox, w.bytes)
	w.head, w.n, w.bytes, w.lost = 0, 0, 0, 0
	return events, lost, w.ended, w.err
}

// end records that the watch ended, with err (io.EOF: normally).
func (w *watcher) end(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	if !errors.Is(err, io.EOF) {
		w.err = err
	}
}

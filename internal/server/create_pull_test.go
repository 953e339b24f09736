package server_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestCreatePullsImage: a create through the Go SDK of an image that is not here
// pulls it (pull missing is the default) and shows the pull's progress when asked;
// pull never answers not_found saying to pull; a bad pull names the allowed values;
// two creates of one missing image pull it once; a caller who may not pull images
// hears why.
func TestCreatePullsImage(t *testing.T) {
	reg := testenv.NewRegistry(t)
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice"},
		Config: func(c *manager.Config) { c.InsecureRegistries = []string{reg.Host} }})

	ref, digest := reg.PushRandom(t, "team/plain")
	pushed := reg.ManifestRequests("team/plain") // the push's own
	resp, err := n.Client.Create(bg, api.CreateSandboxRequest{Name: "plain", Image: ref})
	if err != nil {
		t.Fatalf("create of an image not pulled yet: %v", err)
	}
	if sb := resp.Sandbox; sb == nil || sb.State != api.StateRunning || sb.ImageDigest != digest || sb.Image != ref {
		t.Errorf("created %+v, want running on %s (%s)", resp.Sandbox, ref, digest)
	}
	if _, err := n.Client.Image(bg, ref); err != nil {
		t.Errorf("the pulled image is not listed: %v", err)
	}
	onePull := reg.ManifestRequests("team/plain") - pushed

	// With progress: the pull's steps, then the answer.
	ref2, digest2 := reg.PushRandom(t, "team/shown")
	var mu sync.Mutex
	steps := map[string]int{}
	resp, err = n.Client.Create(bg, api.CreateSandboxRequest{Name: "shown", Image: ref2}, client.WithPullProgress(func(ev api.PullEvent) {
		mu.Lock()
		steps[ev.Status]++
		mu.Unlock()
	}))
	if err != nil || resp.Sandbox == nil || resp.Sandbox.ImageDigest != digest2 || resp.Operation.State != "succeeded" {
		t.Fatalf("create with pull progress = %+v, %v; want running on %s", resp, err, digest2)
	}
	if steps["resolving"] != 1 || steps["done"] != 2 || steps["complete"] != 1 {
		t.Errorf("pull steps seen = %v, want resolving, done for each of 2 layers, complete", steps)
	}
	// An image here pulls nothing, and the answer is the usual one.
	clear(steps)
	resp, err = n.Client.Create(bg, api.CreateSandboxRequest{Name: "again", Image: ref2}, client.WithPullProgress(func(ev api.PullEvent) { steps[ev.Status]++ }))
	if err != nil || resp.Sandbox == nil || resp.Sandbox.ImageDigest != digest2 || len(steps) != 0 {
		t.Errorf("create of an image here = %+v, %v, steps %v; want it created with no pull", resp, err, steps)
	}

	ref3, _ := reg.PushRandom(t, "team/never")
	pushed = reg.ManifestRequests("team/never")
	_, err = n.Client.Create(bg, api.CreateSandboxRequest{Name: "never", Image: ref3, Pull: api.PullNever})
	wantCode(t, "pull never of an image not here", err, "not_found")
	if err == nil || !strings.Contains(err.Error(), "pull it first") {
		t.Errorf("pull never: %v, want it to say to pull the image first", err)
	}
	_, err = n.Client.Create(bg, api.CreateSandboxRequest{Name: "bad", Image: ref3, Pull: "sometimes"})
	wantCode(t, "a bad pull", err, "invalid_argument")
	if err == nil || !strings.Contains(err.Error(), `"sometimes"`) || !strings.Contains(err.Error(), "missing") ||
		!strings.Contains(err.Error(), "always or never") {
		t.Errorf("a bad pull: %v, want it to name the value and missing, always, never", err)
	}
	if reg.ManifestRequests("team/never") != pushed {
		t.Error("a refused create reached the registry")
	}
	if list, _ := n.Client.List(bg, client.ListOptions{}); len(list) != 3 {
		t.Errorf("%d sandboxes after the refusals, want the 3 made before", len(list))
	}

	// Two creates of one missing image at once: one pull.
	ref4, digest4 := reg.PushRandom(t, "team/twice")
	pushed = reg.ManifestRequests("team/twice")
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, nm := range []string{"twice-a", "twice-b"} {
		wg.Go(func() {
			resp, err := n.Client.Create(bg, api.CreateSandboxRequest{Name: nm, Image: ref4})
			if err != nil || resp.Sandbox.ImageDigest != digest4 {
				failed.Add(1)
				t.Errorf("concurrent create %s: %+v, %v", nm, resp, err)
			}
		})
	}
	wg.Wait()
	if got := reg.ManifestRequests("team/twice") - pushed; failed.Load() == 0 && got != onePull {
		t.Errorf("two concurrent creates made %d manifest requests, one pull makes %d", got, onePull)
	}

	// A caller whose roles hold no image.create does not pull.
	ctx := context.Background()
	if _, err := n.Auth.CreateIdentity(ctx, "bot", "user", []string{"agent"}, nil); err != nil {
		t.Fatal(err)
	}
	secret, _, err := n.Auth.CreateToken(ctx, "bot", "test", 0)
	if err != nil {
		t.Fatal(err)
	}
	bot, _ := client.New(client.Options{Addr: n.Addr, Token: secret})
	ref5, _ := reg.PushRandom(t, "team/forbidden")
	pushed = reg.ManifestRequests("team/forbidden")
	_, err = bot.Create(bg, api.CreateSandboxRequest{Name: "nopull", Image: ref5})
	wantCode(t, "a create that would pull, by a caller who may not", err, "not_found")
	if err == nil || !strings.Contains(err.Error(), "image.create") || reg.ManifestRequests("team/forbidden") != pushed {
		t.Errorf("create without image.create: %v (%d manifest requests), want it refused naming image.create, the registry untouched",
			err, reg.ManifestRequests("team/forbidden")-pushed)
	}
}

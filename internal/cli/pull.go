package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

var imagePullVerb = &verb{
	name:  "image pull",
	args:  "REF [--name N] [--public] [--pull always|missing] [--username U --password-stdin]",
	short: "pull an image from its registry (Docker Hub, GHCR, any OCI registry)",
	long: `REF is what docker takes: python:3.12-slim (Docker Hub's library/), ghcr.io/org/app:tag,
registry.example.com:5000/team/app@sha256:.... The manifest for this machine's platform is
picked from a multi-arch index, every layer is verified by its digest as it streams, and
layers already here are not fetched again. The image is named REF unless --name says
otherwise, and pinned by digest: sandboxes keep the digest they started from after the tag
moves. Credentials come from the node's docker config.json, or --username with the
password on standard input. On a terminal each layer gets a progress bar; otherwise one
line per finished layer.`,
	run: runImagePull,
}

var imagePrewarmVerb = &verb{
	name:  "image prewarm",
	args:  "REF",
	short: "make sure an image is here and unpacked, so the next create downloads nothing",
	long: `Pulls REF unless an image of that name is here already. Layers are verified and unpacked
as they arrive, so a create from a prewarmed image is as fast as from the host image.`,
	run: runImagePrewarm,
}

var imageInspectVerb = &verb{
	name:  "image inspect",
	args:  "REF",
	short: "show an image: digest, reference, configuration, layers and the sandboxes on it",
	run:   runImageInspect,
}

var imagePruneVerb = &verb{
	name:  "image prune",
	args:  "--yes",
	short: "remove your images that no sandbox runs on (the host and public images stay)",
	run:   runImagePrune,
}

var registryLoginVerb = &verb{
	name:  "registry login",
	args:  "REGISTRY --username U --password-stdin",
	short: "keep your credentials for a registry on the node, sealed like a secret",
	long: `REGISTRY is a host (ghcr.io, registry.local:5000; docker.io is Docker Hub). The password is
read from standard input. The login is kept as your secret registry-REGISTRY (secret ls
shows it, never its value) and your pulls from that registry use it.`,
	run: runRegistryLogin,
}

var registryLogoutVerb = &verb{name: "registry logout", args: "REGISTRY", short: "forget your credentials for a registry", run: runRegistryLogout}

func runRegistryLogin(c *cmd, args []string) error {
	user := c.fs.String("username", "", "registry user `U`")
	passStdin := c.fs.Bool("password-stdin", false, "read the password from standard input (required)")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *user == "" || !*passStdin {
		return usagef("--username and --password-stdin are required")
	}
	b, err := io.ReadAll(io.LimitReader(c.stdin, 64<<10))
	if err != nil {
		return err
	}
	res, err := cl.RegistryLogin(c.ctx, api.RegistryLoginRequest{Registry: pos[0], Username: *user, Password: strings.TrimRight(string(b), "\r\n")})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(res)
	}
	fmt.Fprintf(c.stdout, "logged in to %s (kept as your secret %s)\n", res.Registry, res.Secret)
	return nil
}

func runRegistryLogout(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if err := cl.RegistryLogout(c.ctx, pos[0]); err != nil {
		return err
	}
	if !c.json() {
		fmt.Fprintf(c.stdout, "logged out of %s\n", termSafe(pos[0]))
	}
	return nil
}

func runImagePrewarm(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	img, err := c.pull(cl, api.PullRequest{Ref: pos[0], Policy: api.PullMissing})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(img)
	}
	fmt.Fprintf(c.stdout, "%s is ready (%s, %d layers, %s)\n", termSafe(img.Name), img.Digest, img.Layers, formatSize(img.Size))
	return nil
}

func runImageInspect(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	img, err := cl.Image(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(img)
	}
	f := [][2]string{{"name", img.Name}, {"digest", img.Digest}, {"reference", orNone(img.Reference)},
		{"visibility", img.Visibility}, {"size", formatSize(img.Size)}, {"used by", orNone(strings.Join(img.Sandboxes, ", "))}}
	if cfg := img.Config; cfg != nil {
		f = append(f, [2]string{"user", orNone(cfg.User)}, [2]string{"working dir", orNone(cfg.WorkingDir)},
			[2]string{"entrypoint", orNone(strings.Join(cfg.Entrypoint, " "))}, [2]string{"cmd", orNone(strings.Join(cfg.Cmd, " "))})
		for _, e := range cfg.Env {
			f = append(f, [2]string{"env", e})
		}
	}
	for i, l := range img.LayerIDs {
		f = append(f, [2]string{fmt.Sprintf("layer %d", i+1), l})
	}
	return printFields(c.stdout, f)
}

func runImagePrune(c *cmd, args []string) error {
	yes := c.fs.Bool("yes", false, "remove without asking")
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	if !*yes {
		return usagef("image prune removes every image of yours that no sandbox runs on; confirm with --yes")
	}
	res, err := cl.PruneImages(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(res)
	}
	for _, n := range res.Removed {
		fmt.Fprintf(c.stdout, "removed %s\n", termSafe(n))
	}
	fmt.Fprintf(c.stdout, "%d images removed, %s freed\n", len(res.Removed), formatSize(res.Freed))
	return nil
}

func runImagePull(c *cmd, args []string) error {
	name := c.fs.String("name", "", "local image name `N` (default: REF)")
	public := c.fs.Bool("public", false, "publish the image for every owner (administrators only)")
	policy := c.fs.String("pull", api.PullAlways, "pull `WHEN`: always, or missing (only when no image of the name is here)")
	user := c.fs.String("username", "", "registry user `U`")
	passStdin := c.fs.Bool("password-stdin", false, "read the registry password from standard input")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	req := api.PullRequest{Ref: pos[0], Name: *name, Policy: *policy, Username: *user}
	if *public {
		req.Visibility = api.VisibilityPublic
	}
	if *passStdin {
		b, err := io.ReadAll(io.LimitReader(c.stdin, 64<<10))
		if err != nil {
			return err
		}
		req.Password = strings.TrimRight(string(b), "\r\n")
	}
	img, err := c.pull(cl, req)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(img)
	}
	return printImages(c.stdout, []api.Image{*img})
}

// pull pulls with progress on stderr (see pullProgress).
func (c *cmd) pull(cl *client.Client, req api.PullRequest) (*api.Image, error) {
	return cl.PullImage(c.ctx, req, c.pullProgress(req.Ref))
}

// pullProgress shows a pull of ref on stderr: bars on a terminal, a line a layer
// otherwise, nothing with --output json (whose stdout is for the result alone).
func (c *cmd) pullProgress(ref string) func(api.PullEvent) {
	if _, ok := terminalFd(c.stderr); ok {
		bars := &pullBars{w: c.stderr, start: time.Now(), layers: map[int]*layerBar{}}
		return bars.update
	}
	if c.json() {
		return nil
	}
	return func(ev api.PullEvent) {
		switch ev.Status {
		case "done", "cached":
			fmt.Fprintf(c.stderr, "layer %d/%d %s %s %s\n", ev.Layer, ev.Layers, shortDigest(ev.Digest), ev.Status, formatSize(ev.Total))
		case "present":
			fmt.Fprintf(c.stderr, "%s is here already\n", termSafe(ref))
		}
	}
}

// createOpts are opts and, unless nothing would show it, the progress of the pull
// the daemon makes first when the image is not here.
func (c *cmd) createOpts(image string, opts ...client.CallOption) []client.CallOption {
	if fn := c.pullProgress(image); fn != nil {
		opts = append(opts, client.WithPullProgress(fn))
	}
	return opts
}

// pullBars draws one line per layer and a total under them, redrawn in place.
type pullBars struct {
	w      io.Writer
	start  time.Time
	layers map[int]*layerBar
	n      int // layers in the image
	drawn  int // lines drawn last time
}

type layerBar struct {
	digest      string
	status      string
	done, total int64
	started     time.Time
}

func (b *pullBars) update(ev api.PullEvent) {
	if ev.Layer == 0 || ev.Layers == 0 {
		return
	}
	b.n = ev.Layers
	l, ok := b.layers[ev.Layer]
	if !ok {
		l = &layerBar{digest: ev.Digest, started: time.Now()}
		b.layers[ev.Layer] = l
	}
	l.status, l.done, l.total = ev.Status, ev.Done, max(ev.Total, l.total)
	if ev.Status == "done" || ev.Status == "cached" {
		l.done = l.total
	}
	b.draw()
}

func (b *pullBars) draw() {
	if b.drawn > 0 {
		fmt.Fprintf(b.w, "\x1b[%dA", b.drawn) // back to the first line
	}
	var done, total int64
	for i := 1; i <= b.n; i++ {
		l, ok := b.layers[i]
		if !ok {
			fmt.Fprintf(b.w, "\r%s\x1b[K\n", fmt.Sprintf("layer %d/%d waiting", i, b.n))
			continue
		}
		done, total = done+l.done, total+l.total
		fmt.Fprintf(b.w, "\r%s\x1b[K\n", renderLayer(i, b.n, l))
	}
	fmt.Fprintf(b.w, "\r%s\x1b[K\n", renderRate("total", done, total, b.start))
	b.drawn = b.n + 1
}

// renderLayer is "layer 2/5 3f4a9c1e2b7d [=====>    ]  48%  12MiB / 25MiB  8.1MiB/s  ETA 2s".
func renderLayer(i, n int, l *layerBar) string {
	head := fmt.Sprintf("layer %d/%d %s", i, n, shortDigest(l.digest))
	switch l.status {
	case "done", "cached":
		return fmt.Sprintf("%s %-11s %s", head, l.status, formatSize(l.total))
	}
	return head + " " + renderRate(l.status, l.done, l.total, l.started)
}

// renderRate is a bar with bytes, rate and time left.
func renderRate(label string, done, total int64, since time.Time) string {
	line := renderProgress(api.ImportEvent{Phase: label, Done: done, Total: total})
	if secs := time.Since(since).Seconds(); secs > 0.2 && done > 0 {
		rate := float64(done) / secs
		line += fmt.Sprintf("  %s/s", formatSize(int64(rate)))
		if total > done {
			line += fmt.Sprintf("  ETA %s", (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second))
		}
	}
	return line
}

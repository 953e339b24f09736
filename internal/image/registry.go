package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// registryClient is one pull's client of one registry, on go-containerregistry: the
// reference, a transport of the pull's own with its timeouts, and a puller that
// authenticates once for all its requests.
type registryClient struct {
	ref     name.Reference
	host    string // the registry as messages name it, "index.docker.io" or "127.0.0.1:5000"
	timeout time.Duration
	tr      *http.Transport
	puller  *remote.Puller
}

// The OCI distribution spec's grammar of repository paths and tags, which
// go-containerregistry's own parsing is laxer than ("a/../b" and "-x" pass it).
var (
	repositoryRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	})
	tagRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`) })
)

// parseReference parses a registry reference as a user types it; insecure lets it be
// reached over plain http.
func parseReference(s string, insecure bool) (name.Reference, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.ParseReference(s, opts...)
	if err == nil && len(s) <= 512 && repositoryRE().MatchString(ref.Context().RepositoryStr()) {
		switch r := ref.(type) {
		case name.Tag:
			if tagRE().MatchString(r.TagStr()) {
				return ref, nil
			}
		case name.Digest:
			if validDigest(r.DigestStr()) {
				return ref, nil
			}
		}
	}
	return nil, errdefs.Invalid(`invalid image reference %q: use [registry[:port]/]repository[:tag][@sha256:<64 hex digits>], `+
		`for example "python:3.12-slim", "ghcr.io/owner/repo:tag" or "127.0.0.1:5000/x@sha256:..."`, s)
}

// newRegistry makes the client of req's registry; timeout bounds every wait on it.
func newRegistry(ref name.Reference, req PullRequest, timeout time.Duration) (*registryClient, error) {
	var proxies sync.Map // the proxies requests went through, by "host:port"
	checked := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error { return checkRegistryAddr(address, req.Insecure) }}
	proxy := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: func(r *http.Request) (*url.URL, error) {
			u, err := http.ProxyFromEnvironment(r)
			if u == nil || err != nil {
				return u, err
			}
			// The dial check sees only the proxy: an address literal is checked here, and
			// the proxy resolves names.
			if ip, perr := netip.ParseAddr(r.URL.Hostname()); perr == nil {
				if err := checkRegistryIP(ip, req.Insecure); err != nil {
					return nil, err
				}
			}
			proxies.Store(proxyAddr(u), true)
			return u, nil
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := checked
			if _, ok := proxies.Load(addr); ok {
				d = proxy // the node's administrator chose it; it does the egress
			}
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: timeout}, nil
		},
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   maxParallelLayers + 1,
	}
	opts := []remote.Option{
		remote.WithTransport(&guardedTransport{inner: tr, insecure: req.Insecure}),
		remote.WithRetryPredicate(retryable),
		remote.WithUserAgent("airlock"),
		remote.WithJobs(maxParallelLayers),
	}
	if req.Username != "" || req.Password != "" {
		opts = append(opts, remote.WithAuth(&authn.Basic{Username: req.Username, Password: req.Password}))
	} else {
		opts = append(opts, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	}
	p, err := remote.NewPuller(opts...)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return &registryClient{ref: ref, host: ref.Context().RegistryStr(), timeout: timeout, tr: tr, puller: p}, nil
}

func (r *registryClient) close() { r.tr.CloseIdleConnections() }

// resolve finds the image for linux/GOARCH that the reference names, and plans its pull.
func (r *registryClient) resolve(ctx context.Context) (*plan, error) {
	desc, err := r.puller.Get(ctx, r.ref)
	if err != nil {
		return nil, r.fail(err, "the image")
	}
	var img v1.Image
	digest := desc.Digest
	switch {
	case desc.MediaType.IsSchema1():
		return nil, errdefs.Invalid("the registry has the image only in the Docker schema 1 format, which is not supported; push it again with a current tool")
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, r.fail(err, "the image index")
		}
		in, d, err := r.platformManifest(idx, 0)
		var nop *noPlatformError
		if errors.As(err, &nop) {
			return nil, errdefs.Invalid("%s", nop.Error())
		}
		if err != nil {
			return nil, err
		}
		digest = d.Digest
		if img, err = in.Image(d.Digest); err != nil {
			return nil, r.fail(err, "the image manifest")
		}
	default:
		if img, err = desc.Image(); err != nil {
			return nil, r.fail(err, "the image manifest")
		}
	}
	if !validDigest(digest.String()) {
		return nil, errdefs.Invalid("the image manifest digest %s is not a sha256 digest", digest)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, r.fail(err, "the image manifest")
	}
	if !m.Config.MediaType.IsConfig() {
		return nil, errdefs.Invalid("%s is not a container image: its config has media type %q", r.ref.Name(), m.Config.MediaType)
	}
	if m.Config.Size > maxMetadataBytes {
		return nil, errdefs.Invalid("the image config is larger than %d bytes", maxMetadataBytes)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, r.fail(err, "the image config")
	}
	// Kept with the layer blobs, so an export gives back this manifest's digest.
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, r.fail(err, "the image manifest")
	}
	if got := digestOf(rawManifest); got != digest.String() {
		return nil, errdefs.Invalid("the image manifest has digest %s, the registry says %s", got, digest)
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return nil, r.fail(err, "the image config")
	}
	if got := digestOf(rawConfig); got != m.Config.Digest.String() {
		return nil, errdefs.Invalid("the image config has digest %s, the manifest says %s", got, m.Config.Digest)
	}
	if want := "linux/" + goruntime.GOARCH; cfg.OS != "" && cfg.OS+"/"+cfg.Architecture != want {
		return nil, errdefs.Invalid("the image is for %s/%s, not %s", cfg.OS, cfg.Architecture, want)
	}
	if len(m.Layers) == 0 {
		return nil, errdefs.Invalid("the image has no layers")
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, errdefs.Invalid("the image config lists %d diff ids for %d layers", len(cfg.RootFS.DiffIDs), len(m.Layers))
	}
	pl := &plan{digest: digest.String(), reference: r.ref.Name(), format: formatOCI, manifest: rawManifest, rawConfig: rawConfig, config: Config{
		Env: cfg.Config.Env, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd,
		WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User,
	}}
	for i, d := range m.Layers {
		what := fmt.Sprintf("layer %d of %d", i+1, len(m.Layers))
		if err := layerMediaType(d.MediaType); err != nil {
			return nil, wrapErr(err, "%s (%s)", what, d.Digest)
		}
		blob, diffID := d.Digest.String(), cfg.RootFS.DiffIDs[i].String()
		if !validDigest(blob) || !validDigest(diffID) || d.Size <= 0 {
			return nil, errdefs.Invalid("%s: blob %s of %d bytes, diff id %s: only sha256 digests and sizes above 0 are supported", what, blob, d.Size, diffID)
		}
		pl.layers = append(pl.layers, layerSource{diffID: diffID, blob: blob, size: d.Size, registry: r.host, verified: true})
	}
	return pl, nil
}

// layerMediaType accepts the layer media types of Linux container images.
func layerMediaType(mt types.MediaType) error {
	switch mt {
	case types.DockerLayer, types.DockerUncompressedLayer, types.OCILayer, types.OCIUncompressedLayer:
		return nil
	case types.OCILayerZStd:
		return errdefs.Invalid("zstd-compressed layers are not supported")
	case types.DockerForeignLayer, types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer:
		return errdefs.Invalid("non-distributable (foreign) layers are not supported")
	}
	return errdefs.Invalid("media type %q is not a container image layer", mt)
}

// platformManifest finds the manifest for linux/GOARCH in idx or an index it nests,
// returning the index that lists it. It skips attestations ("unknown" platforms), and
// takes a manifest without a platform only when it is the only one.
func (r *registryClient) platformManifest(idx v1.ImageIndex, depth int) (v1.ImageIndex, *v1.Descriptor, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, r.fail(err, "the image index")
	}
	want := "linux/" + goruntime.GOARCH
	var have []string
	for i := range im.Manifests {
		d := &im.Manifests[i]
		switch {
		case d.MediaType.IsIndex():
			if depth >= 4 {
				return nil, nil, errdefs.Invalid("the image index nests too deep")
			}
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, nil, r.fail(err, "the image index")
			}
			in, found, err := r.platformManifest(child, depth+1)
			if err == nil {
				return in, found, nil
			}
			var nop *noPlatformError
			if !errors.As(err, &nop) {
				return nil, nil, err
			}
			have = append(have, nop.have...)
		case d.Platform == nil:
			if len(im.Manifests) == 1 {
				return idx, d, nil
			}
		case d.Platform.OS == "unknown":
		case d.Platform.OS+"/"+d.Platform.Architecture == want:
			return idx, d, nil
		default:
			p := d.Platform.OS + "/" + d.Platform.Architecture
			if d.Platform.Variant != "" {
				p += "/" + d.Platform.Variant
			}
			if !slices.Contains(have, p) {
				have = append(have, p)
			}
		}
	}
	return nil, nil, &noPlatformError{want: want, have: have}
}

// noPlatformError is an image index without a manifest for this node's platform.
type noPlatformError struct {
	want string
	have []string
}

func (e *noPlatformError) Error() string {
	if len(e.have) == 0 {
		return fmt.Sprintf("the image has no %s manifest (its index lists no platforms)", e.want)
	}
	return fmt.Sprintf("the image has no %s manifest; it has: %s", e.want, strings.Join(e.have, ", "))
}

// openBlob starts the download of the layer blob; its reader fails with Airlock's
// error classes. A download that breaks off is not resumed: a retry downloads the
// blob again from its start.
func (r *registryClient) openBlob(ctx context.Context, blob string) (io.ReadCloser, error) {
	l, err := r.puller.Layer(ctx, r.ref.Context().Digest(blob))
	if err != nil {
		return nil, r.fail(err, "the layer")
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, r.fail(err, "the layer")
	}
	return &blobReader{rc: rc, r: r, blob: blob}, nil
}

// hasBlob reports whether the registry says, to this pull's credentials, that the
// repository has the blob at its size.
func (r *registryClient) hasBlob(ctx context.Context, blob string, size int64) bool {
	l, err := r.puller.Layer(ctx, r.ref.Context().Digest(blob))
	if err != nil {
		return false
	}
	n, err := l.Size() // a HEAD of the blob
	return err == nil && n == size
}

// blobReader reads a layer blob, turning its failures into Airlock's error classes.
// verifyGotRE finds the digest go-containerregistry computed in its verification error.
var verifyGotRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`got "(sha256:[0-9a-f]{64})"`) })

type blobReader struct {
	rc   io.ReadCloser
	r    *registryClient
	blob string // the digest the blob must have
}

func (b *blobReader) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		// go-containerregistry checks the blob's digest as it streams and says so
		// at its end; that is the one check of it.
		if strings.Contains(err.Error(), "error verifying") {
			got := "another one"
			if m := verifyGotRE().FindStringSubmatch(err.Error()); m != nil {
				got = m[1]
			}
			return n, errdefs.Invalid("layer blob has digest %s, the manifest says %s", got, b.blob).WithCause(err)
		}
		err = b.r.streamError(err)
	}
	return n, err
}

func (b *blobReader) Close() error { return b.rc.Close() }

func (r *registryClient) streamError(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &ne) && ne.Timeout():
		return errdefs.Unavailable("registry %s stopped sending the layer: nothing came for %s", r.host, r.timeout).WithCause(err)
	}
	return errdefs.Unavailable("the download from registry %s broke off", r.host).WithCause(err)
}

// fail turns the error of a registry request for what ("the image", "the layer") into
// one of Airlock's classes, with a message for the client; the registry's own words
// are the cause, for the log.
func (r *registryClient) fail(err error, what string) error {
	var (
		e  *errdefs.Error
		te *transport.Error
		to *timeoutError
		ue *url.Error
		oe *net.OpError
	)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &to):
		return err
	case errors.As(err, &e):
		return err
	case errors.Is(err, errPlainHTTP):
		return errdefs.Invalid("registry %s does not answer over https; allow plain http (insecure) only for a registry on a network you trust", r.host).WithCause(err)
	case errors.As(err, &te):
		return r.statusError(te, what)
	case errors.As(err, &to):
		return errdefs.Unavailable("registry %s did not answer within %s", r.host, r.timeout).WithCause(err)
	case errors.As(err, &ue), errors.As(err, &oe):
		if why := unreachable(err); why != "" {
			return errdefs.Unavailable("cannot reach registry %s: %s", r.host, why).WithCause(err)
		}
		return errdefs.Unavailable("cannot reach registry %s", r.host).WithCause(err)
	}
	return errdefs.Invalid("registry %s sent %s in a form that is not a valid image", r.host, what).WithCause(err)
}

// unreachable says in a few words why a registry could not be reached ("lookup
// index.docker.io: no such host", "connect: connection refused", a certificate that
// does not verify), leaving out the node's own resolver; "" when err says no more.
func unreachable(err error) string {
	var (
		de *net.DNSError
		oe *net.OpError
		ue *url.Error
	)
	switch {
	case errors.As(err, &de):
		if de.IsNotFound {
			return "lookup " + de.Name + ": no such host"
		}
		return "lookup " + de.Name + ": " + de.Err
	case errors.As(err, &oe) && oe.Err != nil:
		return oe.Err.Error()
	case errors.As(err, &ue) && ue.Err != nil:
		return ue.Err.Error() // a TLS handshake that failed, say
	}
	return ""
}

func (r *registryClient) statusError(te *transport.Error, what string) error {
	code := func(codes ...transport.ErrorCode) bool {
		return slices.ContainsFunc(te.Errors, func(d transport.Diagnostic) bool { return slices.Contains(codes, d.Code) })
	}
	switch {
	case te.StatusCode == http.StatusUnauthorized || code(transport.UnauthorizedErrorCode):
		return &errdefs.Error{Class: errdefs.ErrUnauthenticated, Cause: te, Msg: fmt.Sprintf(
			"registry %s refused the credentials: give the right username and password, or add them to the node's docker config.json "+
				"(some registries also say this for an image that does not exist)", r.host)}
	case te.StatusCode == http.StatusForbidden || code(transport.DeniedErrorCode):
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Cause: te, Msg: fmt.Sprintf(
			"registry %s does not let these credentials pull %s", r.host, r.ref.Context().Name())}
	case te.StatusCode == http.StatusNotFound || code(transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode):
		return errdefs.NotFound("registry %s does not have %s (no such repository, tag or digest)", r.host, what).WithCause(te)
	case te.StatusCode == http.StatusTooManyRequests || code(transport.TooManyRequestsErrorCode):
		return errdefs.Unavailable("registry %s is limiting requests; try again later", r.host).WithCause(te)
	}
	return errdefs.Unavailable("registry %s answered %d %s for %s", r.host, te.StatusCode, http.StatusText(te.StatusCode), what).WithCause(te)
}

// maxParallelLayers is how many layers of a pull download at once.
const maxParallelLayers = 5

// errPlainHTTP refuses a plain-http request of a pull that did not allow it.
var errPlainHTTP = errors.New("plain http is not allowed for this registry")

// timeoutError marks a request the registry did not answer in time, so that it is
// told apart after go-containerregistry's retries and scheme fallbacks.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string { return e.err.Error() }
func (e *timeoutError) Unwrap() error { return e.err }

// guardedTransport refuses plain http unless the pull allows it (go-containerregistry
// falls back to it on its own for local-looking registries), and marks timeouts.
type guardedTransport struct {
	inner    http.RoundTripper
	insecure bool
}

func (g *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !g.insecure {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errPlainHTTP
	}
	resp, err := g.inner.RoundTrip(req)
	var ne net.Error
	if err != nil && req.Context().Err() == nil && (errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)) {
		return nil, &timeoutError{err: err}
	}
	return resp, err
}

// retryable says which failed requests go-containerregistry retries: the transient
// ones, but never a timeout (the registry had its time; a retry would only multiply
// the wait) or a refused scheme.
func retryable(err error) bool {
	var (
		to   *timeoutError
		temp interface{ Temporary() bool }
	)
	switch {
	case errors.As(err, &to), errors.Is(err, errPlainHTTP), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return errors.As(err, &temp) && temp.Temporary()
}

// checkRegistryAddr is called with every address a pull dials, once resolved: a
// reference is the owner's choice, so only public addresses are dialled, and loopback
// and private ones too for an insecure pull (a registry the node's administrator
// allowed); cloud metadata and unroutable addresses never are.
func checkRegistryAddr(address string, insecure bool) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return errdefs.Invalid("registry address %q is not an IP address and port", address)
	}
	return checkRegistryIP(ap.Addr(), insecure)
}

func checkRegistryIP(ip netip.Addr, insecure bool) error {
	switch c, why := egress.Classify(ip); {
	case c == egress.Public, c == egress.Private && insecure:
		return nil
	case c == egress.Private:
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: fmt.Sprintf(
			"registry address %s is %s: pulls reach private addresses only from registries the node's configuration lists as insecure", ip, why)}
	default:
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: fmt.Sprintf("registry address %s is %s: pulls never reach it", ip, why)}
	}
}

// proxyAddr is the "host:port" the transport dials for the proxy u.
func proxyAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// idleConn is a registry connection that fails a read or a write that makes no
// progress for idle: a registry that stalls mid-answer is given up on, however long
// the whole answer may take.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(b []byte) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

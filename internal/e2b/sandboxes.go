package e2b

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/manager"
)

// BaseTemplate is E2B's default template; here it is the host image.
const BaseTemplate = "base"

// newSandbox is E2B's NewSandbox body.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           bool              `json:"autoPause"`
	AutoResume          *struct{}         `json:"autoResume"` // Airlock resumes a paused sandbox on use anyway
	Secure              bool              `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	MCP                 map[string]any    `json:"mcp"`
	VolumeMounts        []volumeMount     `json:"volumeMounts"`
	IAM                 map[string]any    `json:"iam"`
}

// volumeMount is E2B's SandboxVolumeMount: one of the caller's volumes (Airlock's,
// made with its own API) at a path.
type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// sandbox is E2B's Sandbox answer.
type sandbox struct {
	TemplateID  string  `json:"templateID"`
	SandboxID   string  `json:"sandboxID"`
	Alias       string  `json:"alias,omitempty"`
	ClientID    string  `json:"clientID"`
	EnvdVersion string  `json:"envdVersion"`
	Domain      *string `json:"domain"`
	// EnvdAccessToken opens the sandbox's in-sandbox plane (X-Access-Token), and
	// TrafficAccessToken its other ports (E2b-Traffic-Access-Token).
	EnvdAccessToken    string `json:"envdAccessToken,omitempty"`
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
}

// listedSandbox is E2B's ListedSandbox, and with the domain its SandboxDetail.
type listedSandbox struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Domain      *string           `json:"domain,omitempty"`
}

// E2B's two states.
const (
	stateRunning = "running"
	statePaused  = "paused"
)

// e2bState is a sandbox's E2B state; "" for one E2B would not list (ended or failed).
func e2bState(s manager.State) string {
	switch s {
	case manager.Running, manager.Creating, manager.Resuming:
		return stateRunning
	case manager.Suspended, manager.Suspending:
		return statePaused
	}
	return ""
}

func templateOf(sb *manager.Sandbox) string {
	if sb.Image == manager.HostImage {
		return BaseTemplate
	}
	return sb.Image
}

func (c *Control) domain() *string {
	if c.opts.Domain == "" {
		return nil
	}
	d := c.opts.Domain
	return &d
}

// toSandbox is sb as E2B shows a sandbox it made or connected to, with access tokens
// issued to the API key p showed.
func (c *Control) toSandbox(sb *manager.Sandbox, p *auth.Principal) sandbox {
	t := templateOf(sb)
	out := sandbox{TemplateID: t, Alias: t, SandboxID: sb.ID, ClientID: ClientID, EnvdVersion: EnvdVersion, Domain: c.domain()}
	if len(c.opts.TokenKey) > 0 && p.TokenID != "" {
		out.EnvdAccessToken = c.tokenFor("envd", sb.ID, sb.Owner, p.TokenID)
		out.TrafficAccessToken = c.tokenFor("traffic", sb.ID, sb.Owner, p.TokenID)
	}
	return out
}

func toListed(sb *manager.Sandbox) listedSandbox {
	t := templateOf(sb)
	md := sb.Labels
	if md == nil {
		md = map[string]string{}
	}
	return listedSandbox{TemplateID: t, Alias: t, SandboxID: sb.ID, ClientID: ClientID,
		StartedAt: sb.CreatedAt.UTC(), EndAt: sb.ExpiresAt.UTC(),
		CPUCount: max(1, int(sb.Limits.CPU+0.999)), MemoryMB: sb.Limits.Memory >> 20, DiskSizeMB: sb.Limits.Disk >> 20,
		Metadata: md, State: e2bState(sb.State), EnvdVersion: EnvdVersion}
}

// call is a manager call by p; E2B sends no idempotency keys or versions.
func call(p *auth.Principal) manager.Call {
	return manager.Call{Owner: p.Identity, Admin: p.Can(auth.Admin)}
}

// timeout reads an E2B timeout (seconds) as a lifetime.
func timeout(field string, secs int64) (time.Duration, error) {
	if secs <= 0 {
		return 0, errdefs.Invalid("%s must be a positive number of seconds, not %d", field, secs)
	}
	if secs > int64(365*24*time.Hour/time.Second) {
		return 0, errdefs.Invalid("%s of %d seconds is more than a year; Airlock's maximum lifetime is far shorter", field, secs)
	}
	return time.Duration(secs) * time.Second, nil
}

func (c *Control) create(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var req newSandbox
	var raw []byte // kept to send on, when a placement may choose another node
	if c.placing(r) {
		var err error
		if raw, err = forward.KeepBody(w, r); err != nil {
			return err
		}
	}
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	switch {
	case req.MCP != nil:
		return errdefs.Invalid("mcp is not supported by Airlock")
	case len(req.VolumeMounts) > 0 && strings.HasPrefix(req.TemplateID, "snap_"):
		return errdefs.Invalid("volumeMounts apply to a sandbox made from a template here, not from a snapshot: attach the volume to the new sandbox with Airlock's API (airlock volume attach) once it is suspended")
	case len(req.IAM) > 0:
		return errdefs.Invalid("iam tokens are not supported: hand a sandbox secrets with Airlock's secret brokering (airlock secret)")
	}
	if strings.HasPrefix(req.TemplateID, "snap_") {
		return c.createFromSnapshot(w, r, p, req)
	}
	if raw != nil {
		if done, err := c.placeCreate(w, r, p, raw, req); done {
			return err
		}
	}
	cr := manager.CreateRequest{Name: newName(), Env: req.EnvVars, Labels: req.Metadata}
	for _, v := range req.VolumeMounts {
		cr.Volumes = append(cr.Volumes, manager.VolumeMountRequest{Name: v.Name, Path: v.Path})
	}
	if req.TemplateID != "" && req.TemplateID != BaseTemplate {
		cr.Image, cr.MayPull = req.TemplateID, p.Can(auth.ImageCreate)
		// A registry reference (a tag, a digest or a registry host in it) is pulled
		// when it is not here, as a native create pulls it; a bare name is an image
		// here, never a guess at one on Docker Hub.
		if !strings.ContainsAny(req.TemplateID, ":/@") {
			cr.Pull = manager.PullNever
			if _, err := c.m.InspectImage(call(p), req.TemplateID); err != nil {
				if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
					return errdefs.Invalid("template %q not found: a template is the name of an Airlock image you can use (airlock image ls), "+
						"a registry reference such as python:3.12-slim (pulled when it is not here), %q for the host image, or the id of one of your snapshots (snap_…)", req.TemplateID, BaseTemplate)
				}
				return err
			}
		}
	}
	if req.Timeout != nil || req.AutoPause {
		secs := int64(defaultConnectTimeout / time.Second) // E2B's default timeout
		if req.Timeout != nil {
			secs = *req.Timeout
		}
		d, err := timeout("timeout", secs)
		if err != nil {
			return err
		}
		if req.AutoPause {
			// E2B pauses such a sandbox at its timeout instead of ending it: here it
			// is suspended once it has gone that long without calls or traffic, and
			// ends at the node's default lifetime.
			cr.IdleSuspend = d.String()
		} else {
			cr.MaxLifetime = d.String()
		}
	}
	network := req.Network
	if network == nil {
		network = &networkConfig{}
	}
	pol, err := network.egressPolicy(req.AllowInternetAccess != nil && !*req.AllowInternetAccess)
	if err != nil {
		return err
	}
	cr.Network = pol
	_, sb, err := c.m.Create(r.Context(), call(p), cr)
	if err != nil {
		return fieldNames(err)
	}
	writeJSON(w, http.StatusCreated, c.toSandbox(sb, p))
	return nil
}

// fieldNames rewords the manager's refusals in E2B's field names.
func fieldNames(err error) error {
	var e *errdefs.Error
	if errors.As(err, &e) && errors.Is(err, errdefs.ErrInvalidArgument) {
		r := strings.NewReplacer("max_lifetime", "timeout (the sandbox's maximum lifetime)",
			"idle_suspend", "timeout with autoPause (how long without calls before the sandbox is paused)", "label", "metadata", "environment variable", "envVars entry")
		return &errdefs.Error{Class: errdefs.ErrInvalidArgument, Msg: r.Replace(e.Msg), Cause: err}
	}
	return err
}

// newName names a sandbox E2B made; E2B sandboxes have no names of their own.
func newName() string {
	var b [6]byte
	rand.Read(b[:])
	return "e2b-" + hex.EncodeToString(b[:])
}

// resolve finds one of p's sandboxes that E2B would still see.
func (c *Control) resolve(r *http.Request, p *auth.Principal) (*manager.Sandbox, error) {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, "sb_") {
		return nil, errdefs.NotFound("sandbox %q not found (Airlock sandbox ids start with sb_)", id)
	}
	sb, err := c.m.Resolve(r.Context(), p.Identity, id)
	if err != nil {
		return nil, err
	}
	if e2bState(sb.State) == "" {
		return nil, errdefs.NotFound("sandbox %q not found: it is %s", id, sb.State)
	}
	return sb, nil
}

func (c *Control) get(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	out := toListed(sb)
	out.Domain = c.domain()
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (c *Control) kill(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	if _, _, err := c.m.Terminate(r.Context(), call(p), sb.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (c *Control) setTimeout(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(w, r, &req, false); err != nil {
		return err
	}
	if req.Timeout == nil {
		return errdefs.Invalid("timeout is required: the number of seconds from now after which the sandbox ends")
	}
	d, err := timeout("timeout", *req.Timeout)
	if err != nil {
		return err
	}
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	if _, _, err := c.m.SetLifetime(r.Context(), call(p), sb.ID, d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (c *Control) pause(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	if e2bState(sb.State) == statePaused {
		return errdefs.Precondition("sandbox %q is already paused", sb.ID)
	}
	if _, _, err := c.m.Suspend(r.Context(), call(p), sb.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resumeBody is E2B's ResumedSandbox and ConnectSandbox.
// defaultConnectTimeout is the lifetime a version-2 connect gives when it names none.
const defaultConnectTimeout = 300 * time.Second

type resumeBody struct {
	Timeout   *int64 `json:"timeout"`
	AutoPause bool   `json:"autoPause"`
}

func (c *Control) resume(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var req resumeBody
	if err := decode(w, r, &req, true); err != nil {
		return err
	}
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	if e2bState(sb.State) == stateRunning {
		return errdefs.Precondition("sandbox %q is already running", sb.ID)
	}
	sb, err = c.wake(r, p, sb, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c.toSandbox(sb, p))
	return nil
}

// connect resumes a paused sandbox (201) or answers for a running one (200). A paused
// sandbox then ends timeout seconds from now; a running one's lifetime is only ever
// extended to that, never shortened (as E2B's connect does).
func (c *Control) connect(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	var req resumeBody
	v2 := strings.HasPrefix(r.URL.Path, "/v2/")
	if err := decode(w, r, &req, v2); err != nil {
		return err
	}
	// Version 2 makes the timeout optional: 300 seconds.
	if req.Timeout == nil {
		if !v2 {
			return errdefs.Invalid("timeout is required: the number of seconds from now after which the sandbox ends")
		}
		secs := int64(defaultConnectTimeout / time.Second)
		req.Timeout = &secs
	}
	sb, err := c.resolve(r, p)
	if err != nil {
		return err
	}
	if e2bState(sb.State) == stateRunning {
		d, err := timeout("timeout", *req.Timeout)
		if err != nil {
			return err
		}
		if !sb.ExpiresAt.IsZero() && !time.Now().Add(d).After(sb.ExpiresAt) {
			writeJSON(w, http.StatusOK, c.toSandbox(sb, p))
			return nil
		}
		if _, sb, err = c.m.SetLifetime(r.Context(), call(p), sb.ID, d); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, c.toSandbox(sb, p))
		return nil
	}
	sb, err = c.wake(r, p, sb, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, c.toSandbox(sb, p))
	return nil
}

// wake sets a paused sandbox's lifetime (when asked) and resumes it.
func (c *Control) wake(r *http.Request, p *auth.Principal, sb *manager.Sandbox, req resumeBody) (*manager.Sandbox, error) {
	if req.AutoPause {
		return nil, errdefs.Invalid("autoPause can only be set at create (it pauses a sandbox after its timeout without calls); a resumed sandbox keeps what it was created with, so leave autoPause false")
	}
	if req.Timeout != nil {
		d, err := timeout("timeout", *req.Timeout)
		if err != nil {
			return nil, err
		}
		if _, _, err := c.m.SetLifetime(r.Context(), call(p), sb.ID, d); err != nil {
			return nil, err
		}
	}
	_, sb, err := c.m.Resume(r.Context(), call(p), sb.ID)
	return sb, err
}

func (c *Control) listV1(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	q := r.URL.Query()
	for k := range q {
		if k != "metadata" {
			return errdefs.Invalid("unknown query parameter %q; GET /sandboxes takes metadata (GET /v2/sandboxes also takes state, template, startedAfter, startedBefore, order, limit and nextToken)", k)
		}
	}
	list, err := c.list(r, p, listQuery{states: []string{stateRunning}})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toListedAll(list))
	return nil
}

// listV2Params are the query parameters GET /v2/sandboxes takes.
var listV2Params = []string{"metadata", "state", "template", "startedAfter", "startedBefore", "order", "limit", "nextToken"}

func (c *Control) listV2(w http.ResponseWriter, r *http.Request, p *auth.Principal) error {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains(listV2Params, k) {
			return errdefs.Invalid("unknown query parameter %q; use %s", k, strings.Join(listV2Params, ", "))
		}
	}
	lq := listQuery{states: []string{stateRunning, statePaused}, template: q.Get("template")}
	if vs := q["state"]; len(vs) > 0 {
		lq.states = nil
		for _, v := range vs {
			for _, s := range strings.Split(v, ",") {
				if s != stateRunning && s != statePaused {
					return errdefs.Invalid("unknown state %q; states are running and paused", s)
				}
				lq.states = append(lq.states, s)
			}
		}
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return errdefs.Invalid("invalid order %q: asc (oldest first) or desc (newest first, the default)", o)
	}
	for _, b := range []struct {
		name string
		t    *time.Time
	}{{"startedAfter", &lq.after}, {"startedBefore", &lq.before}} {
		if v := q.Get(b.name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return errdefs.Invalid("invalid %s %q: an RFC 3339 time such as 2025-01-02T15:04:05Z", b.name, v)
			}
			*b.t = t
		}
	}
	limit, err := limitOf(q)
	if err != nil {
		return err
	}
	lq.limit = limit
	if v := q.Get("nextToken"); v != "" {
		// The page starts after the cursor's sandbox, wherever it now is: sandboxes
		// made or ended between pages move no other one to another page.
		if lq.cur, err = cursorOf(v); err != nil {
			return err
		}
	}
	list, err := c.list(r, p, lq)
	if err != nil {
		return err
	}
	if len(list) > limit {
		list = list[:limit]
		last := list[limit-1]
		w.Header().Set("X-Next-Token", cursor{at: last.CreatedAt, id: last.ID}.token())
	}
	writeJSON(w, http.StatusOK, toListedAll(list))
	return nil
}

// cursor is where a page of sandboxes ends: the last one's creation time and id.
type cursor struct {
	at time.Time
	id string
}

func (c cursor) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("c%d_%s", c.at.UnixNano(), c.id)))
}

func cursorOf(v string) (*cursor, error) {
	bad := errdefs.Invalid("invalid nextToken %q: pass the x-next-token of the previous page", v)
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || !strings.HasPrefix(string(b), "c") {
		return nil, bad
	}
	ns, id, ok := strings.Cut(string(b[1:]), "_")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(id, "sb_") {
		return nil, bad
	}
	return &cursor{at: time.Unix(0, n), id: id}, nil
}

// page is where a paginated list starts and how much of it to answer.
type page struct{ offset, limit int }

// limitOf reads E2B's limit: 1 to 100, default 100.
func limitOf(q url.Values) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		return 0, errdefs.Invalid("invalid limit %q: from 1 to 100", v)
	}
	return n, nil
}

// pageOf reads E2B's limit and nextToken (opaque: the X-Next-Token of the previous
// page).
func pageOf(q url.Values) (page, error) {
	limit, err := limitOf(q)
	pg := page{limit: limit}
	if err != nil {
		return pg, err
	}
	if v := q.Get("nextToken"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		n, aerr := strconv.Atoi(strings.TrimPrefix(string(b), "o"))
		if err != nil || aerr != nil || n < 0 || !strings.HasPrefix(string(b), "o") {
			return pg, errdefs.Invalid("invalid nextToken %q: pass the x-next-token of the previous page", v)
		}
		pg.offset = n
	}
	return pg, nil
}

// writePage answers pg's part of list, and the next page's token in X-Next-Token when
// there is more.
func writePage[T any](w http.ResponseWriter, pg page, list []T) {
	offset := min(pg.offset, len(list))
	end := min(offset+pg.limit, len(list))
	if end < len(list) {
		w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("o%d", end))))
	}
	writeJSON(w, http.StatusOK, list[offset:end])
}

// listQuery is what a list asks for: E2B states, a template, a creation window and
// an order (newest first unless asc).
type listQuery struct {
	states        []string
	template      string
	after, before time.Time
	asc           bool
	// cur, when set, starts the list after its sandbox; limit, when not 0, lists
	// at most limit+1 (the one more says another page follows).
	cur   *cursor
	limit int
}

// list returns p's sandboxes that q and the request's metadata query ("k1=v1&k2=v2",
// URL-encoded) ask for, in q's order.
func (c *Control) list(r *http.Request, p *auth.Principal, q listQuery) ([]*manager.Sandbox, error) {
	f := manager.SandboxFilter{Owner: p.Identity}
	if v := r.URL.Query().Get("metadata"); v != "" {
		md, err := url.ParseQuery(v)
		if err != nil {
			return nil, errdefs.Invalid("invalid metadata filter %q: use key=value pairs joined by &, URL-encoded", v)
		}
		f.Labels = map[string]string{}
		for k, vs := range md {
			if k == "" || len(vs) != 1 {
				return nil, errdefs.Invalid("invalid metadata filter %q: each key once, as key=value", v)
			}
			f.Labels[k] = vs[0]
		}
	}
	for _, s := range []manager.State{manager.Running, manager.Creating, manager.Resuming, manager.Suspended, manager.Suspending} {
		if slices.Contains(q.states, e2bState(s)) {
			f.States = append(f.States, s)
		}
	}
	// The store lists in q's order, a page at a time from the cursor on, until
	// enough pass the filters it does not apply.
	f.Desc = !q.asc
	if q.cur != nil {
		f.After = &manager.ListPlace{CreatedAt: q.cur.at, ID: q.cur.id}
	}
	if q.limit > 0 {
		f.Limit = q.limit + 1
	}
	var out []*manager.Sandbox
	for {
		page, err := c.m.List(r.Context(), f)
		if err != nil {
			return nil, err
		}
		for _, sb := range page {
			if (q.template == "" || templateOf(sb) == q.template) &&
				(q.after.IsZero() || sb.CreatedAt.After(q.after)) &&
				(q.before.IsZero() || sb.CreatedAt.Before(q.before)) {
				out = append(out, sb)
			}
		}
		if f.Limit == 0 || len(out) > q.limit || len(page) < f.Limit {
			return out, nil
		}
		f.After = manager.PlaceOf(page[len(page)-1])
	}
}

func toListedAll(list []*manager.Sandbox) []listedSandbox {
	out := make([]listedSandbox, 0, len(list))
	for _, sb := range list {
		out = append(out, toListed(sb))
	}
	return out
}

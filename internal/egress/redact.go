package egress

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/klauspost/compress/zstd"
)

// What comes back from a secret's host is redacted before the sandbox sees it: an
// upstream that echoes a request (an error page, a CORS or debugging answer) or shows
// a stored credential would otherwise hand the sandbox the value it must not hold.
// Every answer to a request to one of a secret's hosts, whether or not this request
// carried the placeholder, has each form of the value (see redactForms) replaced by as
// many '*': the status line, the headers of informational and final answers, the
// trailers, and the body, streamed through a window as long as the longest form, so a
// value split across reads is found too. Lengths stay as they were, so Content-Length
// and byte offsets hold. A body in gzip, deflate or zstd is decoded to be redacted and
// sent as it is (identity); the request asks for no other encoding, and an answer in
// one is refused. The request also goes without Range and If-Range (a value cut across
// two ranges would be recognised in neither) and without Sec-WebSocket-Extensions (no
// compressed WebSocket frames); the bytes of a protocol the connection switches to
// (WebSocket) are redacted as they come. Only whole forms are recognised: a value that
// an upstream sends in parts (split over WebSocket frames or chunks of a stream it
// encodes itself), cut short, or transformed otherwise passes.

// minBase64Form is the shortest base64 run of a value worth recognising: shorter ones
// would match too much else.
const minBase64Form = 8

// redactForms are the byte strings that give away value: the value itself,
// URL-escaped (query and path), as a JSON string holds it, and in base64 (standard and
// URL alphabets, padded or not), where the value may start at any of three offsets of
// a base64 group: the full groups that hold only value bytes.
func redactForms(value string) []string {
	if value == "" {
		return nil
	}
	forms := []string{value, url.QueryEscape(value), url.PathEscape(value)}
	if j, err := json.Marshal(value); err == nil {
		forms = append(forms, string(j[1:len(j)-1]))
	}
	for skip := range 3 {
		if skip >= len(value) {
			break
		}
		v := value[skip:]
		v = v[:len(v)/3*3]
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			if f := enc.EncodeToString([]byte(v)); len(f) >= minBase64Form {
				forms = append(forms, f)
			}
		}
	}
	return forms
}

// pattern is one form to redact, with its KMP failure function.
type pattern struct {
	find []byte
	fail []int32 // fail[i]: the longest proper prefix of find[:i+1] that is also its suffix
}

func newPattern(f string) pattern {
	p := pattern{find: []byte(f), fail: make([]int32, len(f))}
	k := int32(0)
	for i := 1; i < len(f); i++ {
		for k > 0 && f[i] != f[k] {
			k = p.fail[k-1]
		}
		if f[i] == f[k] {
			k++
		}
		p.fail[i] = k
	}
	return p
}

// tail is the length of the longest suffix of b that is a proper prefix of p: the
// bytes that could be the start of p, had b gone on.
func (p *pattern) tail(b []byte) int {
	if n := len(p.find) - 1; len(b) > n {
		b = b[len(b)-n:]
	}
	k := int32(0)
	for _, c := range b {
		for k > 0 && p.find[k] != c {
			k = p.fail[k-1]
		}
		if p.find[k] == c {
			k++
		}
	}
	return int(k)
}

// redactor replaces a set of byte strings with runs of '*' as long as each.
type redactor struct {
	pats []pattern // longest first: of two that start at one place, the longer wins
}

// newRedactor redacts forms (empty ones ignored); nil if there are none.
func newRedactor(forms []string) *redactor {
	forms = slices.DeleteFunc(slices.Clone(forms), func(f string) bool { return f == "" })
	slices.SortFunc(forms, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	forms = slices.Compact(forms)
	if len(forms) == 0 {
		return nil
	}
	r := &redactor{}
	for _, f := range forms {
		r.pats = append(r.pats, newPattern(f))
	}
	return r
}

// redactorFor is the redactor of a request's open secrets and of the Basic credentials
// (base64, as sent) a value went out in; nil if there is nothing to redact.
func redactorFor(open []openSecret, basics []string) *redactor {
	forms := slices.Clone(basics)
	for _, o := range open {
		forms = append(forms, redactForms(o.value)...)
	}
	return newRedactor(forms)
}

// redact appends b to dst with every whole form replaced, and returns how much of b it
// consumed: unless final, a tail of b that could be the start of a form is left for the
// next call, to be seen with what follows. Of two forms, the one that starts first is
// replaced (the longer, if they start at one place).
func (r *redactor) redact(dst, b []byte, final bool) ([]byte, int) {
	hold := len(b) // where the bytes that may start a form begin
	if !final {
		hold -= r.tail(b)
	}
	next := make([]int, len(r.pats)) // where each form is next found, from i on
	for k := range r.pats {
		next[k] = bytes.Index(b, r.pats[k].find)
	}
	i := 0
	for {
		at, p := -1, -1
		for k := range r.pats {
			if next[k] >= 0 && next[k] < i {
				if j := bytes.Index(b[i:], r.pats[k].find); j >= 0 {
					next[k] = i + j
				} else {
					next[k] = -1
				}
			}
			if next[k] >= 0 && (at < 0 || next[k] < at) {
				at, p = next[k], k
			}
		}
		if p < 0 || at >= hold {
			return append(dst, b[i:hold]...), hold
		}
		dst = append(dst, b[i:at]...)
		dst = append(dst, bytes.Repeat([]byte{'*'}, len(r.pats[p].find))...)
		i = at + len(r.pats[p].find)
		if i > hold { // a form ran into the held tail: what may start one now starts later
			hold = len(b) - r.tail(b[i:])
		}
	}
}

// tail is the length of the longest suffix of b that could be the start of a form.
func (r *redactor) tail(b []byte) int {
	t := 0
	for k := range r.pats {
		t = max(t, r.pats[k].tail(b))
	}
	return t
}

// String is s redacted.
func (r *redactor) String(s string) string {
	for k := range r.pats {
		if strings.Contains(s, string(r.pats[k].find)) {
			out, _ := r.redact(nil, []byte(s), true)
			return string(out)
		}
	}
	return s
}

// header redacts h's names and values in place.
func (r *redactor) header(h http.Header) {
	for name, vs := range h {
		for i, v := range vs {
			vs[i] = r.String(v)
		}
		if n := r.String(name); n != name {
			delete(h, name)
			h[n] = append(h[n], vs...)
		}
	}
}

// prepare fits the outgoing request of a redacted answer: no ranges, no encoding the
// proxy cannot decode, no compressed WebSocket frames.
func (r *redactor) prepare(out *http.Request) {
	out.Header.Del("Range")
	out.Header.Del("If-Range")
	out.Header.Del("Sec-Websocket-Extensions")
	if ae := out.Header.Values("Accept-Encoding"); len(ae) > 0 {
		var keep []string
		for _, list := range ae {
			for c := range strings.SplitSeq(list, ",") {
				name, _, _ := strings.Cut(c, ";")
				if name = strings.ToLower(strings.TrimSpace(name)); decodable(name) || name == "identity" {
					keep = append(keep, strings.TrimSpace(c))
				}
			}
		}
		out.Header.Del("Accept-Encoding")
		if len(keep) > 0 {
			out.Header.Set("Accept-Encoding", strings.Join(keep, ", "))
		}
	}
}

func decodable(coding string) bool {
	switch coding {
	case "gzip", "x-gzip", "deflate", "zstd":
		return true
	}
	return false
}

// response redacts an upstream's answer before the reverse proxy copies it to the
// sandbox: status, headers, and a body (decoded first) and trailers as they stream.
func (r *redactor) response(res *http.Response) error {
	res.Status = r.String(res.Status)
	r.header(res.Header)
	r.header(res.Trailer) // the names, announced before the body
	if res.StatusCode == http.StatusSwitchingProtocols {
		if rwc, ok := res.Body.(io.ReadWriteCloser); ok {
			res.Body = switchedConn{Reader: &redactBody{src: rwc, r: r}, Writer: rwc, Closer: rwc}
		}
		return nil
	}
	if res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	var codings []string
	for _, v := range res.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	body := &redactBody{src: res.Body, closer: res.Body, r: r, atEOF: func() { r.header(res.Trailer) }}
	if len(codings) > 0 {
		for _, c := range codings {
			if !decodable(c) {
				res.Body.Close()
				return errdefs.Unavailable("the answer is in Content-Encoding %q, which the proxy cannot decode to keep the secrets of %s out of it",
					headerSafe(c), res.Request.URL.Hostname())
			}
		}
		body.src = &decoder{src: res.Body, codings: codings}
		res.Header.Del("Content-Encoding")
		res.Header.Del("Content-Length")
		res.ContentLength = -1
	}
	res.Body = body
	return nil
}

// switchedConn is the upstream end of a switched protocol, read through a redactor.
type switchedConn struct {
	io.Reader
	io.Writer
	io.Closer
}

// redactBody streams src through a redactor.
type redactBody struct {
	src    io.Reader
	closer io.Closer // the body underneath; nil for a switched connection
	r      *redactor
	atEOF  func() // runs once src is drained, before io.EOF is returned

	in  []byte // read, not yet redacted: what may be the start of a form
	out []byte // redacted, not yet returned
	off int
	err error
}

const redactChunk = 32 << 10

func (b *redactBody) Read(p []byte) (int, error) {
	for b.off == len(b.out) {
		if b.err != nil {
			return 0, b.err
		}
		if cap(b.in)-len(b.in) < redactChunk {
			b.in = slices.Grow(b.in, redactChunk)
		}
		n, err := b.src.Read(b.in[len(b.in):cap(b.in)])
		b.in = b.in[:len(b.in)+n]
		var k int
		b.out, k = b.r.redact(b.out[:0], b.in, err != nil)
		b.off = 0
		b.in = b.in[:copy(b.in, b.in[k:])]
		if err != nil {
			if err == io.EOF && b.atEOF != nil {
				b.atEOF()
			}
			b.err = err
		}
	}
	n := copy(p, b.out[b.off:])
	b.off += n
	return n, nil
}

func (b *redactBody) Close() error {
	if d, ok := b.src.(*decoder); ok {
		d.Close()
	}
	if b.closer != nil {
		return b.closer.Close()
	}
	return nil
}

// decoder decodes a body in codings (in the order they were applied) as it is read.
type decoder struct {
	src     io.Reader
	codings []string
	r       io.Reader
	closers []io.Closer // the decoders, which hold buffers (zstd's) until closed
	err     error
}

func (d *decoder) Read(p []byte) (int, error) {
	if d.r == nil && d.err == nil {
		r := d.src
		for i := len(d.codings) - 1; i >= 0 && d.err == nil; i-- {
			var rc io.ReadCloser
			if rc, d.err = decode(d.codings[i], r); d.err == nil {
				r = rc
				d.closers = append(d.closers, rc)
			}
		}
		d.r = r
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.r.Read(p)
}

func (d *decoder) Close() error {
	for _, c := range slices.Backward(d.closers) {
		c.Close()
	}
	return nil
}

// decode reads r in coding; deflate is zlib (RFC 9110), or raw deflate from a server
// that sends that instead.
func decode(coding string, r io.Reader) (io.ReadCloser, error) {
	switch coding {
	case "gzip", "x-gzip":
		return gzip.NewReader(r)
	case "deflate":
		br := bufio.NewReader(r)
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			return zlib.NewReader(br)
		}
		return flate.NewReader(br), nil
	case "zstd":
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(8<<20))
		if err != nil {
			return nil, err
		}
		return z.IOReadCloser(), nil
	}
	return nil, errdefs.Unavailable("no decoder for Content-Encoding %q", coding)
}

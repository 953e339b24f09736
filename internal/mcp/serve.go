package mcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/client"
)

// Listener says where Serve serves: on In and Out (stdio) when Addr is empty, else over
// streamable HTTP at http://Addr/mcp, to requests that carry "Authorization: Bearer
// Token" when Token is set.
type Listener struct {
	Addr, Token string
	In          io.Reader
	Out         io.Writer
}

// Serve runs the server New makes over cl on l until ctx ends or, over stdio, until the
// client closes its end (once every request read is answered): both are a normal end.
// A daemon that does not answer yet is logged, not an error: tool calls fail until it
// does.
func Serve(ctx context.Context, cl *client.Client, opts Options, l Listener) error {
	opts = opts.withDefaults()
	srv, err := New(cl, opts)
	if err != nil {
		return err
	}
	if _, err := cl.Status(ctx); err != nil && ctx.Err() == nil {
		opts.Logger.Warn("the daemon is not reachable; tool calls fail until it is", "daemon", cl.Target(), "err", err)
	}
	if l.Addr == "" {
		err := srv.Run(ctx, Stdio(l.In, l.Out))
		if ctx.Err() != nil || errors.Is(err, io.EOF) {
			return nil // interrupted, or the client went away: both are the normal end
		}
		return err
	}
	return serveHTTP(ctx, srv, l.Addr, l.Token, opts.Logger)
}

// serveHTTP serves MCP over streamable HTTP at /mcp until ctx ends.
func serveHTTP(ctx context.Context, srv *mcpsdk.Server, addr, token string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	h := mcpsdk.NewStreamableHTTPHandler(func(*http.Request) *mcpsdk.Server { return srv },
		&mcpsdk.StreamableHTTPOptions{SessionTimeout: time.Hour})
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.NewCrossOriginProtection().Handler(requireBearer(token, h)))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving MCP over streamable HTTP", "url", fmt.Sprintf("http://%s/mcp", ln.Addr()), "token", token != "")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close() // open event streams do not end by themselves
	}
	<-errc
	return nil
}

// requireBearer passes only requests that carry "Authorization: Bearer token" (all of
// them when token is empty).
func requireBearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock-mcp"`)
			http.Error(w, "a bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

package cli

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/version"
)

var mcpVerb = &verb{
	name:  "mcp",
	args:  "[--listen HOST:PORT [--listen-token T]] [--max-output SIZE] [--max-read SIZE]",
	short: "serve Airlock's tools to AI agents over the Model Context Protocol",
	long: `Without --listen, MCP runs over standard input and output, the way MCP clients start a
local server; with --listen, over streamable HTTP at http://HOST:PORT/mcp. It runs until
interrupted, or until the stdio client closes standard input (every request read before
that is still answered, so requests can be piped in). Logs go to standard error.

The tools: run_code, exec, read_file, write_file, list_files, create_sandbox,
list_sandboxes, suspend, resume, terminate, snapshot, fork (docs/mcp.md). Every call
reaches the daemon as this command's identity (--socket, or --addr with --token), so the
daemon's roles and policies apply. Over HTTP, whoever reaches the address acts as that
identity: a non-loopback address needs --listen-token (or $AIRLOCK_MCP_TOKEN), which
clients send as "Authorization: Bearer T".`,
	run: runMCP,
}

// maxMCPCap bounds --max-output and --max-read: an answer is read by a model.
const maxMCPCap = 16 << 20

func runMCP(c *cmd, args []string) error {
	listen := c.fs.String("listen", "", "serve streamable HTTP on `HOST:PORT` instead of stdio")
	token := c.fs.String("listen-token", "", "bearer token `T` HTTP clients must send (default $AIRLOCK_MCP_TOKEN)")
	var maxOutput, maxRead sizeFlag
	c.fs.Var(&maxOutput, "max-output", "show at most `SIZE` of stdout, and of stderr, per call (default 32KiB)")
	c.fs.Var(&maxRead, "max-read", "return at most `SIZE` per read_file call (default 32KiB)")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	if maxOutput > maxMCPCap || maxRead > maxMCPCap {
		return usagef("--max-output and --max-read must be at most %s", formatSize(maxMCPCap))
	}
	if *token == "" {
		*token = os.Getenv("AIRLOCK_MCP_TOKEN")
	}
	if *listen != "" {
		if err := checkListen(*listen, *token); err != nil {
			return err
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, nil)).With("component", "mcp")
	srv, err := mcp.New(cl, mcp.Options{Version: version.String(), OutputLimit: int(maxOutput), ReadLimit: int(maxRead), Logger: log,
		HostWorkspaces: *listen == "" && cl.Local()})
	if err != nil {
		return err
	}
	if _, err := cl.Status(c.ctx); err != nil && c.ctx.Err() == nil {
		log.Warn("the daemon is not reachable; tool calls fail until it is", "daemon", cl.Target(), "err", err)
	}
	if *listen == "" {
		return serveMCPStdio(c, srv)
	}
	return serveMCPHTTP(c.ctx, srv, *listen, *token, log)
}

// checkListen refuses to serve a non-loopback address without a token.
func checkListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--listen %q is not HOST:PORT", addr)
	}
	if token != "" || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usagef("--listen %s is not a loopback address: anyone who reaches it would act as you; set --listen-token (or $AIRLOCK_MCP_TOKEN)", addr)
}

// serveMCPStdio speaks MCP on the command's standard input and output until the client
// closes its end (once every request read is answered) or the command is interrupted.
func serveMCPStdio(c *cmd, srv *mcpsdk.Server) error {
	err := srv.Run(c.ctx, mcp.Stdio(c.stdin, c.stdout))
	if c.ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil // interrupted, or the client went away: both are the normal end
	}
	return err
}

// serveMCPHTTP serves MCP over streamable HTTP at /mcp until ctx ends.
func serveMCPHTTP(ctx context.Context, srv *mcpsdk.Server, addr, token string, log *slog.Logger) error {
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

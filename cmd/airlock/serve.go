package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/airlockhq/airlock/internal/cli"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
)

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	file := fs.String("config", "", "configuration file (YAML or JSON; unknown keys are errors)")
	stateDir := fs.String("state-dir", "", "directory for the database, images and sandboxes (default /var/lib/airlock)")
	socket := fs.String("socket", "", "unix socket of the API (default /run/airlock/airlock.sock)")
	listen := fs.String("listen", "", "also serve the API on TCP HOST:PORT (needs tokens in the config)")
	e2bListen := fs.String("e2b-listen", "", "also serve the E2B-compatible API on TCP HOST:PORT (API keys: airlock token create --format e2b)")
	e2bDomain := fs.String("e2b-domain", "", "with --e2b-listen: host names PORT-SANDBOXID.`DOMAIN` reach a sandbox's ports")
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		cli.PrintFlagError(os.Stderr, "serve", fs, err)
		return &exitErr{2}
	}
	if fs.NArg() > 0 {
		cli.PrintFlagError(os.Stderr, "serve", fs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
		return &exitErr{2}
	}
	cfg := config.Default()
	if *file != "" {
		// The file says who administers the node (unix_users) and what runs as root
		// (runc): a file another user can change is theirs to say it in.
		if os.Geteuid() == 0 {
			abs, err := filepath.Abs(*file)
			if err != nil {
				return err
			}
			if err := daemon.TrustedFile(abs, "configuration file"); err != nil {
				return err
			}
		}
		var err error
		if cfg, err = config.Load(*file); err != nil {
			return err
		}
	}
	if *stateDir != "" {
		cfg.StateDir = *stateDir
	}
	if *socket != "" {
		cfg.Socket = *socket
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *e2bListen != "" {
		cfg.E2BListen = *e2bListen
	}
	if *e2bDomain != "" {
		cfg.E2BDomain = *e2bDomain
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	level := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}[cfg.LogLevel]
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, hopts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, hopts)
	}
	log := slog.New(h)
	slog.SetDefault(log)
	return daemon.Run(ctx, cfg, log)
}

func checkConfig(args []string) error {
	if len(args) != 1 {
		cli.PrintFlagError(os.Stderr, "check-config", flag.NewFlagSet("check-config", flag.ContinueOnError), errors.New("want one FILE"))
		return &exitErr{2}
	}
	if _, err := config.Load(args[0]); err != nil {
		return err
	}
	fmt.Println(args[0] + ": ok")
	return nil
}

// exitErr ends the process with a code after the message was printed.
type exitErr struct{ code int }

func (e *exitErr) Error() string { return fmt.Sprintf("exit %d", e.code) }

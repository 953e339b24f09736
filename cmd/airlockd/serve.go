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
	var f cli.ServeFlags
	f.Register(fs)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		cli.PrintFlagError(os.Stderr, "serve", fs, err)
		return cli.ExitError{Code: 2}
	}
	if fs.NArg() > 0 {
		cli.PrintFlagError(os.Stderr, "serve", fs, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
		return cli.ExitError{Code: 2}
	}
	cfg := config.Default()
	if f.Config != "" {
		// The file says who administers the node (unix_users) and what runs as root
		// (runc): a file another user can change is theirs to say it in.
		if os.Geteuid() == 0 {
			abs, err := filepath.Abs(f.Config)
			if err != nil {
				return err
			}
			if err := daemon.TrustedFile(abs, "configuration file"); err != nil {
				return err
			}
		}
		var err error
		if cfg, err = config.Load(f.Config); err != nil {
			return err
		}
	}
	if f.StateDir != "" {
		cfg.StateDir = f.StateDir
	}
	if f.Socket != "" {
		cfg.Socket = f.Socket
	}
	if f.Listen != "" {
		cfg.Listen = f.Listen
	}
	if f.E2BListen != "" {
		cfg.E2BListen = f.E2BListen
	}
	if f.E2BDomain != "" {
		cfg.E2BDomain = f.E2BDomain
	}
	cfg.ApplyEnv()
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
		return cli.ExitError{Code: 2}
	}
	if _, err := config.Load(args[0]); err != nil {
		return err
	}
	fmt.Println(args[0] + ": ok")
	return nil
}

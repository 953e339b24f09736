// Package router decides where one shell command or code snippet runs — on the host, on
// the host inside the fence, or in a sandbox — and why. It owns the isolation profiles
// (off, safe, strict: bundles of mode, scope, workspace access and network that are
// derived, never stored) and the risk scoring of shell commands (parsed with
// mvdan.cc/sh, never matched with regular expressions).
//
// It only decides: a pure function of the command text and the settings, with no
// syscalls, files, environment, processes or network. Whoever acts on a decision does
// so elsewhere — a sandbox through the manager, the host fence through internal/fence —
// so the manager and the server link the decision without the fence. Its vocabulary
// (profiles, settings, kinds, places, the decision's shape) is package decision's, so
// that the CLI, which only reads decisions, links no scoring.
//
// Hostile surface: the command text is written by whoever asks, most often a model. A
// command that cannot be parsed or scored is treated as high risk.
//
// It must not import the daemon's packages (server, manager, store, runtime) nor the
// fence, and nothing that reaches the kernel (syscall, x/sys, Landlock, os, os/exec,
// net); internal/layers holds it to that.
package router

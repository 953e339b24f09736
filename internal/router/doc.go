// Package router decides where one shell command or code snippet runs — on the host, on
// the host inside a light fence, or in a sandbox — and why. It owns the isolation
// profiles (off, safe, strict: bundles of mode, scope, workspace access and network that
// are derived, never stored), the risk scoring of shell commands (parsed with mvdan.cc/sh,
// never matched with regular expressions) and the host fence (Landlock plus namespaces).
//
// Hostile surface: the command text is written by whoever asks, most often a model. A
// command that cannot be parsed or scored is treated as high risk.
//
// It must not import the daemon's packages (server, manager, store, runtime); it is used by
// the CLI, the daemon and the SDKs alike.
package router

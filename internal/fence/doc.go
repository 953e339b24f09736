// Package fence runs one command on this host walled in by the kernel rather than by a
// container: Landlock for files and TCP, and user, mount and network namespaces for what
// Landlock cannot wall (fence.go draws the three ways it is put up). It owns the fence
// itself, its child (ChildMain, behind the hidden ChildCommand argument of the airlock
// binary) and the daemon's fence socket (Server), which puts the fence up for callers
// that may not make namespaces, with the ids the kernel reports for the connection.
//
// Hostile surface: the command, its paths and its environment come from whoever runs
// it, and on the fence socket from any local user. The fence fails closed: without
// Landlock, or when a namespace or mount cannot be made, the command does not run.
//
// It decides nothing about where a command should run; internal/router does. It must not
// import Airlock beyond internal/errdefs, and the router, the manager, the server and
// the CLI's scoring must not import it.
package fence

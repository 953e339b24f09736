// Package leftover names one thing a node left on the host: the items package sweep
// finds and removes. It is a package of its own, with no dependencies, so that the CLI
// prints `airlock gc --state-dir`'s items without linking sweep (netlink, nftables),
// which only the daemon's binary runs.
package leftover

// Item is one thing a node left on the host.
type Item struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Error says why removing it failed; "" when it was removed (or, in a dry run,
	// would be).
	Error string `json:"error,omitempty"`
}

package store

import "context"

// ClusterKeys is the part of the Store contract that keeps, for each key every node of
// one store must share (the audit key, the secret key, the E2B token key), a
// fingerprint of it: the first node to start records its own, and every later node
// compares. A fingerprint is keyed by the key it names, never the key or a plain hash
// of it.
type ClusterKeys interface {
	// ClaimClusterKey stores fingerprint under name unless a fingerprint is stored
	// there already, and returns the one stored: fingerprint itself for the first
	// claim, the first claim's for every later one. Of nodes claiming one name at
	// once, exactly one's fingerprint is stored and all get it back.
	ClaimClusterKey(ctx context.Context, name, fingerprint string) (string, error)
}

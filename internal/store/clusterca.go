package store

import (
	"context"
	"time"
)

// ClusterCARecord is the certificate authority the nodes of one cluster prove
// themselves with: its certificate in clear, its private key sealed under a key only
// the holders of the cluster's join token can derive. The store keeps the bytes it is
// given; what they mean is internal/clustertls's.
type ClusterCARecord struct {
	CertPEM   []byte    // the CA certificate, PEM
	SealedKey []byte    // the CA private key, sealed (nonce and ciphertext)
	Salt      []byte    // the salt the sealing key is derived with
	Verifier  []byte    // what tells a wrong join token apart from a damaged record
	CreatedAt time.Time // when the first node made it
}

// ClusterCA is the part of the Store contract that keeps the one cluster CA.
type ClusterCA interface {
	// PutClusterCAIfAbsent stores r unless a cluster CA is stored already, and returns
	// the one stored: r's copy for the first put, the first put's for every later one.
	// Of nodes putting at once, exactly one's record is stored and all get it back.
	PutClusterCAIfAbsent(ctx context.Context, r *ClusterCARecord) (*ClusterCARecord, error)
	// GetClusterCA returns the stored cluster CA, or ErrNotFound.
	GetClusterCA(ctx context.Context) (*ClusterCARecord, error)
}

// Shared is what a store that other nodes reach too says of itself (PostgreSQL). A
// store without it is the node's own.
type Shared interface {
	SharedByNodes() bool
}

// IsShared says whether other nodes may reach s.
func IsShared(s any) bool {
	sh, ok := s.(Shared)
	return ok && sh.SharedByNodes()
}

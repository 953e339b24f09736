// Package clustertls owns the mutual TLS between the nodes of one cluster: the
// cluster's certificate authority, which the first node makes and keeps in the shared
// store with its private key sealed under the join token, and each node's short-lived
// certificate, issued from it and renewed at half-life with no restart. A node without
// the join token gets no certificate.
//
// It decides who a peer is and nothing else: it does not listen, dial or say what
// nodes tell each other, and it reads nothing of the host (files, environment).
package clustertls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

const (
	// LeafLifetime is how long a node's certificate is valid; the node takes a new one
	// at half of it.
	LeafLifetime = 24 * time.Hour
	// CALifetime is how long the cluster CA is valid.
	CALifetime = 10 * 365 * 24 * time.Hour
	// clockSkew is how far before its issue a certificate is valid, for peers whose
	// clocks are behind.
	clockSkew = 5 * time.Minute
	// URIScheme is the scheme of the URI SAN that names a node: airlock-node://NAME.
	URIScheme = "airlock-node"
)

// Identity is one node's part in the cluster's TLS: the CA its peers must chain to and
// its own certificate. It is safe for concurrent use.
type Identity struct {
	node  string
	ips   []net.IP
	dns   []string
	now   func() time.Time
	seal  *sealer
	roots *x509.CertPool

	mu      sync.Mutex
	leaf    *tls.Certificate
	renewAt time.Time
}

// Open returns node nodeName's identity in the cluster of st: it makes the cluster CA
// if st has none (of nodes opening at once, one's CA is kept and all use it), unseals
// its key with joinToken and issues the node a certificate for nodeName and the host of
// advertise (HOST:PORT, or ""). now is the clock (nil: time.Now).
//
// A joinToken other than the one the CA was sealed under is refused, and so is an
// empty one on a store other nodes reach.
func Open(ctx context.Context, st store.ClusterCA, joinToken, nodeName, advertise string, now func() time.Time) (*Identity, error) {
	if now == nil {
		now = time.Now
	}
	if err := config.CheckNodeName(nodeName); err != nil {
		return nil, errdefs.Invalid("cluster TLS: %v", err)
	}
	id := &Identity{node: nodeName, now: now}
	if advertise != "" {
		host, _, err := net.SplitHostPort(advertise)
		if err != nil || host == "" {
			return nil, errdefs.Invalid("cluster TLS: the advertised address %q must be HOST:PORT", advertise)
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			id.ips = []net.IP{ip.AsSlice()}
		} else {
			id.dns = []string{host}
		}
	}
	if joinToken == "" && store.IsShared(st) {
		return nil, errdefs.Precondition("the nodes of a shared store prove themselves to each other with the cluster's join token, and none is set: "+
			"set cluster.join_token (or %s) to the same secret on every node, such as `openssl rand -hex 32` prints", config.JoinTokenEnv)
	}
	rec, err := st.GetClusterCA(ctx)
	if errors.Is(err, errdefs.ErrNotFound) {
		made, merr := newCA(joinToken, now())
		if merr != nil {
			return nil, merr
		}
		rec, err = st.PutClusterCAIfAbsent(ctx, made)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: %w", err)
	}
	if id.seal, err = openSealer(rec, joinToken); err != nil {
		return nil, err
	}
	id.roots = x509.NewCertPool()
	id.roots.AddCert(id.seal.cert)
	if _, err := id.certificate(); err != nil {
		return nil, err
	}
	return id, nil
}

// Node is the name this identity's certificate carries.
func (id *Identity) Node() string { return id.node }

// CA is the cluster CA's certificate.
func (id *Identity) CA() *x509.Certificate { return id.seal.cert }

// certificate returns the node's certificate, issuing a new one from half its life on.
// A renewal that fails keeps the one it has while that is valid.
func (id *Identity) certificate() (*tls.Certificate, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	now := id.now()
	if id.leaf != nil && now.Before(id.renewAt) {
		return id.leaf, nil
	}
	leaf, err := id.issue(now)
	if err != nil {
		if id.leaf != nil && now.Before(id.leaf.Leaf.NotAfter) {
			return id.leaf, nil
		}
		return nil, err
	}
	id.leaf, id.renewAt = leaf, now.Add(LeafLifetime/2)
	return leaf, nil
}

// issue makes the node a new key and certificate, valid from now.
func (id *Identity) issue(now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: make the node's key: %w", err)
	}
	caKey, err := id.seal.caKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.node, Organization: []string{"Airlock"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(LeafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{nodeURI(id.node)},
		IPAddresses:  id.ips,
		DNSNames:     id.dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, id.seal.cert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: issue the node's certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS: read the node's certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}, nil
}

// ServerConfig is the TLS configuration of the node's listener for other nodes: TLS
// 1.3, and a client certificate issued by the cluster CA, no other, required.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      id.roots,
		Time:           id.now,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return id.certificate() },
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := id.PeerNode(&cs)
			return err
		},
	}
}

// ClientConfig is the TLS configuration for dialling node peerNode: TLS 1.3, the
// node's own certificate, and a server that must chain to the cluster CA (never the
// system's roots) and be named peerNode, whatever address it was dialled at.
func (id *Identity) ClientConfig(peerNode string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The server is checked in VerifyConnection, against the cluster CA and
		// peerNode's name rather than a host name.
		InsecureSkipVerify:   true,
		Time:                 id.now,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return id.certificate() },
		VerifyConnection: func(cs tls.ConnectionState) error {
			name, err := id.peer(&cs, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if name != peerNode {
				return fmt.Errorf("cluster TLS: the server is node %q, not %q", name, peerNode)
			}
			return nil
		},
	}
}

// PeerNode returns the name of the node at the other end of cs, whose certificate it
// checks again against the cluster CA.
func (id *Identity) PeerNode(cs *tls.ConnectionState) (string, error) {
	return id.peer(cs, x509.ExtKeyUsageAny)
}

// peer checks that cs's peer certificate is the cluster CA's for usage and names a
// node, and returns the name.
func (id *Identity) peer(cs *tls.ConnectionState, usage x509.ExtKeyUsage) (string, error) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return "", errors.New("cluster TLS: the peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: id.roots, CurrentTime: id.now(), KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return "", fmt.Errorf("cluster TLS: the peer's certificate is not the cluster's: %w", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].Scheme != URIScheme {
		return "", fmt.Errorf("cluster TLS: the peer's certificate names no node (want one %s:// URI)", URIScheme)
	}
	u := leaf.URIs[0]
	if *u != *nodeURI(u.Host) || config.CheckNodeName(u.Host) != nil {
		return "", fmt.Errorf("cluster TLS: the peer's certificate names no node: %q is not %s://NAME", u.String(), URIScheme)
	}
	return u.Host, nil
}

// nodeURI is the URI SAN that names node.
func nodeURI(node string) *url.URL { return &url.URL{Scheme: URIScheme, Host: node} }

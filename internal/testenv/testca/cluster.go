package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"testing"
	"time"
)

// Node issues the cluster node name's certificate (a URI SAN airlock-node://NAME, for
// server and client use) and returns it as that node's forward.ClusterTLS.
func (ca *CA) Node(t testing.TB, name string) *Node {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		URIs:     []*url.URL{{Scheme: "airlock-node", Host: name}},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return &Node{cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool: pool}
}

// Node is one cluster node's certificate under the CA, as forward.ClusterTLS.
type Node struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// ServerConfig requires a client certificate of the CA.
func (n *Node) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{n.cert}, ClientCAs: n.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// ClientConfig accepts only node's certificate of the CA.
func (n *Node) ClientConfig(node string) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{n.cert}, MinVersion: tls.VersionTLS13,
		InsecureSkipVerify: true, // the chain and the node's name are checked below, not a DNS name
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: n.pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return err
			}
			if got, err := peerName(cs.PeerCertificates[0]); err != nil || got != node {
				return fmt.Errorf("the peer is node %q, not %q (%v)", got, node, err)
			}
			return nil
		}}
}

// PeerNode is the node a verified peer's certificate names.
func (n *Node) PeerNode(cs *tls.ConnectionState) (string, error) {
	if cs == nil || len(cs.VerifiedChains) == 0 {
		return "", errors.New("no verified certificate")
	}
	return peerName(cs.VerifiedChains[0][0])
}

func peerName(c *x509.Certificate) (string, error) {
	for _, u := range c.URIs {
		if u.Scheme == "airlock-node" && u.Host != "" {
			return u.Host, nil
		}
	}
	return "", errors.New("the certificate names no cluster node")
}

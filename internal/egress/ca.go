package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// The CA's files in its directory.
const (
	CACertFile = "ca.pem"     // the certificate sandboxes trust (0644)
	CAKeyFile  = "ca-key.pem" // its private key (0600, refused if more open)
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	clockSkew    = time.Hour
	maxLeaves    = 4096
)

// CA is the per-node certificate authority that lets the proxy terminate TLS: an ECDSA
// P-256 key and certificate that every sandbox trusts, and short-lived leaf
// certificates minted per host on demand and cached until close to expiry.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	leafKey *ecdsa.PrivateKey // shared by all leaves: one signature per new host, not a keygen

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewCA makes a CA in memory, named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return newCA(der, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		leafKey: leafKey,
		leaves:  make(map[string]*tls.Certificate),
	}, nil
}

// LoadOrCreateCA loads the CA from dir (CACertFile, CAKeyFile), or makes one there if
// neither file exists. It refuses a key file that group or others can read, a key that
// does not match the certificate, an expired CA, and a directory holding only one file.
func LoadOrCreateCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, certErr := os.Stat(certPath)
	keyInfo, keyErr := os.Stat(keyPath)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return createCA(dir)
	case certErr != nil || keyErr != nil:
		return nil, errdefs.Precondition("the egress CA in %s is incomplete (%s and %s must both exist); "+
			"restore the missing file, or remove both to make a new CA", dir, CACertFile, CAKeyFile).
			WithCause(errors.Join(certErr, keyErr))
	case keyInfo.Mode().Perm()&0o077 != 0:
		return nil, errdefs.Precondition("%s is readable by group or others (mode %04o); run chmod 600 %s",
			keyPath, keyInfo.Mode().Perm(), keyPath)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	certBlock, _ := pem.Decode(certPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if certBlock == nil || certBlock.Type != "CERTIFICATE" || keyBlock == nil {
		return nil, errdefs.Precondition("%s or %s is not PEM of a certificate and a key", certPath, keyPath)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, errdefs.Precondition("%s is not a PKCS #8 private key", keyPath).WithCause(err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errdefs.Precondition("%s is not an ECDSA key", keyPath)
	}
	ca, err := newCA(certBlock.Bytes, key)
	if err != nil {
		return nil, errdefs.Precondition("%s is not a valid certificate", certPath).WithCause(err)
	}
	if pub, ok := ca.cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) || !ca.cert.IsCA {
		return nil, errdefs.Precondition("%s is not a CA certificate for the key in %s", certPath, keyPath)
	}
	if time.Now().After(ca.cert.NotAfter) {
		return nil, errdefs.Precondition("the egress CA in %s expired on %s; remove %s and %s to make a new one "+
			"(running sandboxes trust the new one after a restart)", dir, ca.cert.NotAfter.Format(time.DateOnly),
			CACertFile, CAKeyFile)
	}
	return ca, nil
}

func createCA(dir string) (*CA, error) {
	host, _ := os.Hostname()
	ca, err := NewCA(fmt.Sprintf("Airlock egress CA (%s)", host))
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, CACertFile), ca.certPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// writeFileAtomic writes data to a temporary file with mode perm and renames it into
// place, so a crash leaves the old file or the new one, never half of one.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (retErr error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Certificate returns the CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// CertPEM returns the CA certificate in PEM, for a sandbox's trust store.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Pool returns a pool holding only the CA certificate.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// Leaf returns a certificate for host (a canonical name or IP address), minting one if
// none is cached or the cached one is in the last quarter of its life.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if leaf, ok := c.leaves[host]; ok && now.Before(leaf.Leaf.NotAfter.Add(-leafValidity/4)) {
		return leaf, nil
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(c.cert.NotAfter) {
		tmpl.NotAfter = c.cert.NotAfter
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("mint a certificate for %s: %w", host, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if len(c.leaves) >= maxLeaves {
		for h, l := range c.leaves {
			if now.After(l.Leaf.NotAfter.Add(-leafValidity / 4)) {
				delete(c.leaves, h)
			}
		}
		if len(c.leaves) >= maxLeaves {
			clear(c.leaves)
		}
	}
	leaf := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: c.leafKey, Leaf: parsed}
	c.leaves[host] = leaf
	return leaf, nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial would still be valid.
		return big.NewInt(1)
	}
	return n
}

// RootPool returns the pool the proxy verifies upstream servers against: the system
// pool plus the CA certificates in extraPEM.
func RootPool(extraPEM ...[]byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	for i, p := range extraPEM {
		if !pool.AppendCertsFromPEM(p) {
			return nil, errdefs.Invalid("extra upstream CA %d holds no PEM certificate", i+1)
		}
	}
	return pool, nil
}

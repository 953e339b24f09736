package clustertls

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// The labels that keep the keys derived from one join token apart.
const (
	sealInfo     = "airlock cluster CA key v1"
	verifierInfo = "airlock cluster CA verifier v1"
)

// sealer opens the cluster CA's sealed private key. It holds the key derived from the
// join token, never the CA key itself: each issue unseals it and lets it go.
type sealer struct {
	cert   *x509.Certificate
	key    []byte // AES-256 key derived from the join token and the record's salt
	sealed []byte // nonce, then ciphertext
}

// deriveKeys returns the sealing key and the verifier of token and salt.
func deriveKeys(token string, salt []byte) (seal, verifier []byte, err error) {
	if seal, err = hkdf.Key(sha256.New, []byte(token), salt, sealInfo, 32); err != nil {
		return nil, nil, err
	}
	if verifier, err = hkdf.Key(sha256.New, []byte(token), salt, verifierInfo, 32); err != nil {
		return nil, nil, err
	}
	return seal, verifier, nil
}

// newCA makes a cluster CA and returns its record, its key sealed under token.
func newCA(token string, now time.Time) (*store.ClusterCARecord, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the cluster CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Airlock cluster CA", Organization: []string{"Airlock"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make the cluster CA certificate: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the cluster CA key: %w", err)
	}
	salt := make([]byte, 32)
	rand.Read(salt)
	sealKey, verifier, err := deriveKeys(token, salt)
	if err != nil {
		return nil, fmt.Errorf("derive the cluster CA's sealing key: %w", err)
	}
	gcm, err := newGCM(sealKey)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, gcm.NonceSize())
	rand.Read(nonce)
	return &store.ClusterCARecord{
		CertPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		SealedKey: gcm.Seal(nonce, nonce, pkcs8, der), // bound to this certificate
		Salt:      salt,
		Verifier:  verifier,
		CreatedAt: now,
	}, nil
}

// openSealer checks rec against token and returns what unseals its key, and the key
// once, so the caller knows it unseals. A token other than the one rec was sealed
// under is told apart from a damaged record.
func openSealer(rec *store.ClusterCARecord, token string) (*sealer, error) {
	block, rest := pem.Decode(rec.CertPEM)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, damaged("its certificate is not one PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, damaged("its certificate does not parse: %v", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid {
		return nil, damaged("its certificate is not a CA's")
	}
	sealKey, verifier, err := deriveKeys(token, rec.Salt)
	if err != nil {
		return nil, fmt.Errorf("derive the cluster CA's sealing key: %w", err)
	}
	if subtle.ConstantTimeCompare(verifier, rec.Verifier) != 1 {
		return nil, errdefs.Precondition("the join token does not match the cluster's (the cluster CA in the store was sealed under another token): "+
			"set cluster.join_token (or %s) to the token the cluster's other nodes have", config.JoinTokenEnv)
	}
	s := &sealer{cert: cert, key: sealKey, sealed: rec.SealedKey}
	if _, err := s.caKey(); err != nil {
		return nil, err
	}
	return s, nil
}

// caKey unseals the CA's private key and checks it is the certificate's.
func (s *sealer) caKey() (*ecdsa.PrivateKey, error) {
	gcm, err := newGCM(s.key)
	if err != nil {
		return nil, err
	}
	if len(s.sealed) < gcm.NonceSize() {
		return nil, damaged("its sealed key is %d bytes, shorter than a nonce", len(s.sealed))
	}
	nonce, ct := s.sealed[:gcm.NonceSize()], s.sealed[gcm.NonceSize():]
	pkcs8, err := gcm.Open(nil, nonce, ct, s.cert.Raw)
	if err != nil {
		return nil, damaged("its sealed key does not open under the join token, which matches: the key or the certificate was changed")
	}
	k, err := x509.ParsePKCS8PrivateKey(pkcs8)
	if err != nil {
		return nil, damaged("its key does not parse: %v", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(s.cert.PublicKey) {
		return nil, damaged("its key is not its certificate's")
	}
	return key, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("cluster CA sealing: %w", err)
	}
	return cipher.NewGCM(b)
}

// damaged is the error of a stored CA record that cannot be what a node stored.
func damaged(format string, args ...any) error {
	return fmt.Errorf("the cluster CA in the store is damaged: "+format+
		"; remove the cluster_ca record only if no node of the cluster runs, then start one node", args...)
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b)
	b[0] &= 0x7f // positive
	return new(big.Int).SetBytes(b)
}

package egress

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	for file, want := range map[string]os.FileMode{CAKeyFile: 0o600, CACertFile: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode = %04o, want %04o", file, got, want)
		}
	}
	if c := ca.Certificate(); !c.IsCA || c.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA certificate IsCA=%v algorithm=%v, want an ECDSA CA", c.IsCA, c.PublicKeyAlgorithm)
	}
	again, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if !bytes.Equal(again.CertPEM(), ca.CertPEM()) {
		t.Errorf("loading gave another CA than the one created")
	}

	for _, host := range []string{"pypi.org", "127.0.0.1", "2001:db8::1", "under_score.example.com"} {
		leaf, err := again.Leaf(host)
		if err != nil {
			t.Fatalf("Leaf(%s): %v", host, err)
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool()})
		if err != nil {
			t.Errorf("leaf for %s does not verify against the CA: %v", host, err)
		}
		if cached, _ := again.Leaf(host); cached != leaf {
			t.Errorf("Leaf(%s) minted a second certificate instead of using the cached one", host)
		}
		if life := leaf.Leaf.NotAfter.Sub(leaf.Leaf.NotBefore); life > leafValidity+clockSkew {
			t.Errorf("leaf for %s lives %s, want at most %s", host, life, leafValidity+clockSkew)
		}
	}
	leaf, err := again.Leaf("pypi.org")
	if err != nil {
		t.Fatalf("Leaf(pypi.org) again: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "evil.org", Roots: ca.Pool()}); err == nil {
		t.Errorf("leaf for pypi.org verifies for evil.org")
	}
}

func TestLoadOrCreateCARefuses(t *testing.T) {
	other, err := NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		spoil   func(dir string) error
		wantMsg string
	}{
		{"key readable by others", func(dir string) error {
			return os.Chmod(filepath.Join(dir, CAKeyFile), 0o644)
		}, "chmod 600"},
		{"key missing", func(dir string) error {
			return os.Remove(filepath.Join(dir, CAKeyFile))
		}, "incomplete"},
		{"certificate missing", func(dir string) error {
			return os.Remove(filepath.Join(dir, CACertFile))
		}, "incomplete"},
		{"certificate of another key", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, CACertFile), other.CertPEM(), 0o644)
		}, "not a CA certificate for the key"},
		{"garbage key", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, CAKeyFile), []byte("not pem"), 0o600)
		}, "not PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := LoadOrCreateCA(dir); err != nil {
				t.Fatal(err)
			}
			if err := tt.spoil(dir); err != nil {
				t.Fatal(err)
			}
			_, err := LoadOrCreateCA(dir)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("LoadOrCreateCA = %v, want an error saying %q", err, tt.wantMsg)
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("error %v is not failed precondition", err)
			}
		})
	}
}

func TestRootPool(t *testing.T) {
	ca, err := NewCA("extra")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := RootPool(ca.CertPEM())
	if err != nil {
		t.Fatalf("RootPool: %v", err)
	}
	leaf, err := ca.Leaf("upstream.example")
	if err != nil {
		t.Fatalf("Leaf(upstream.example) of the extra CA: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "upstream.example", Roots: pool}); err != nil {
		t.Errorf("a leaf of the extra CA does not verify against the pool: %v", err)
	}
	if _, err := RootPool([]byte("garbage")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("RootPool(garbage) error = %v, want invalid argument", err)
	}
}

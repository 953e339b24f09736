// Package secret keeps the secrets owners hand to their sandboxes: each value is sealed
// with AES-256-GCM under the node's secret key before it reaches the store, and the API
// sees only metadata (a safe preview, a keyed fingerprint, versions, allowed hosts,
// expiry, revocation). Rotation adds a version; rekeying re-seals every version under a
// new key while the node runs. Bindings (bind.go) hand a secret to one of its owner's
// sandboxes; the Delivery (delivery.go) puts files on a tmpfs of its own, variables in
// executions, and placeholders with their substitutions before the egress proxy.
//
// Hostile surfaces it guards: no value is ever logged, returned by an API, stored in
// the clear or put in an error; a preview shows at most a few characters of a long
// token and none of a password; fingerprints are keyed, so a short value cannot be
// found by hashing guesses.
//
// It must not import the manager, the server or the runtime.
package secret

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// MaxValue is the largest value a secret may hold; the limit is exclusive.
const MaxValue = 64 << 10

// The types of secret.
var Types = []string{"token", "password", "certificate"}

var (
	nameRE = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	hostRE = lazyRegexp(`^(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
)

// keyring is the node's secret keys: the current one seals, every one opens. The
// fingerprint key is separate and never changes, so fingerprints survive a rekey.
type keyring struct {
	Current     string            `json:"current"`
	Keys        map[string][]byte `json:"keys"`
	Fingerprint []byte            `json:"fingerprint"`
}

// Service manages secrets.
type Service struct {
	st      store.Store
	keyPath string
	now     func() time.Time

	mu       sync.RWMutex
	ring     keyring
	rekeying sync.Mutex                  // one Rekey at a time: each forgets every key but its own
	onChange func(owner, sandbox string) // the delivery's refresh; sandbox "" is every one
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// Open returns the service, reading (or making, 0600) the keyring at keyPath.
func Open(st store.Store, keyPath string) (*Service, error) {
	s := &Service{st: st, keyPath: keyPath, now: time.Now}
	data, err := os.ReadFile(keyPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.ring = keyring{Current: "k1", Keys: map[string][]byte{"k1": randomBytes(32)}, Fingerprint: randomBytes(32)}
		if err := s.saveRing(); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("secret key: %w", err)
	default:
		if err := json.Unmarshal(data, &s.ring); err != nil || len(s.ring.Keys[s.ring.Current]) != 32 || len(s.ring.Fingerprint) != 32 {
			return nil, fmt.Errorf("secret key %s is damaged", keyPath)
		}
	}
	return s, nil
}

func (s *Service) saveRing() error {
	data, err := json.Marshal(s.ring)
	if err != nil {
		return err
	}
	return durable.WriteFile(s.keyPath, data, 0o600)
}

func (s *Service) seal(keyID string, value []byte) ([]byte, error) {
	block, err := aes.NewCipher(s.ring.Keys[keyID])
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	nonce := randomBytes(gcm.NonceSize())
	return gcm.Seal(nonce, nonce, value, nil), nil
}

func (s *Service) open(v store.SecretVersion) ([]byte, error) {
	key, ok := s.ring.Keys[v.KeyID]
	if !ok {
		return nil, fmt.Errorf("secret version %d is sealed under key %q, which this node does not have", v.Version, v.KeyID)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if len(v.Sealed) < gcm.NonceSize() {
		return nil, errors.New("damaged secret version")
	}
	out, err := gcm.Open(nil, v.Sealed[:gcm.NonceSize()], v.Sealed[gcm.NonceSize():], nil)
	if err != nil {
		return nil, errors.New("secret version does not open: damaged, or sealed under another key")
	}
	return out, nil
}

// preview is what may be shown of a value: a few characters of a long token, nothing
// of a password, only the size of a certificate.
func preview(typ string, value []byte) string {
	switch {
	case typ == "token" && len(value) >= 20:
		return string(value[:4]) + "…" + string(value[len(value)-2:])
	case typ == "certificate":
		return fmt.Sprintf("certificate, %d bytes", len(value))
	}
	return "••••••••"
}

// CleanValue trims one trailing newline and checks the size: empty and MaxValue or
// more are refused.
func CleanValue(v []byte) ([]byte, error) {
	if t, ok := bytes.CutSuffix(v, []byte("\n")); ok {
		v = bytes.TrimSuffix(t, []byte("\r"))
	}
	if len(v) == 0 {
		return nil, errdefs.Invalid("the secret's value is empty")
	}
	if len(v) >= MaxValue {
		return nil, errdefs.Invalid("the secret's value is %d bytes; it must be under %d (64 KiB)", len(v), MaxValue)
	}
	return v, nil
}

func (s *Service) version(n int, typ string, value []byte) (store.SecretVersion, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sealed, err := s.seal(s.ring.Current, value)
	if err != nil {
		return store.SecretVersion{}, err
	}
	mac := hmac.New(sha256.New, s.ring.Fingerprint)
	mac.Write(value)
	return store.SecretVersion{Version: n, CreatedAt: s.now().UTC(), KeyID: s.ring.Current, Sealed: sealed,
		Preview: preview(typ, value), Fingerprint: "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))[:16], Size: len(value)}, nil
}

// CreateRequest says what secret to make.
type CreateRequest struct {
	Name, Type, Description string
	// AllowedHosts are the only hosts proxy delivery sends the value to; a secret with
	// none is for file and env delivery only.
	AllowedHosts []string
	ExpiresAt    time.Time
	Value        []byte
}

// Create stores a new secret of owner's.
func (s *Service) Create(ctx context.Context, owner string, req CreateRequest) (*store.Secret, error) {
	if !nameRE().MatchString(req.Name) {
		return nil, errdefs.Invalid("invalid secret name %q: 1 to 63 letters, digits, '.', '_' or '-'", req.Name)
	}
	if !slices.Contains(Types, req.Type) {
		return nil, errdefs.Invalid("invalid secret type %q: %s", req.Type, strings.Join(Types, ", "))
	}
	for _, h := range req.AllowedHosts {
		if !hostRE().MatchString(h) {
			return nil, errdefs.Invalid("invalid allowed host %q: a host name such as api.example.com or *.example.com", h)
		}
	}
	if !req.ExpiresAt.IsZero() && !req.ExpiresAt.After(s.now()) {
		return nil, errdefs.Invalid("the expiry %s is not in the future", req.ExpiresAt.Format(time.RFC3339))
	}
	value, err := CleanValue(req.Value)
	if err != nil {
		return nil, err
	}
	v, err := s.version(1, req.Type, value)
	if err != nil {
		return nil, err
	}
	sec := &store.Secret{Owner: owner, Name: req.Name, Type: req.Type, Description: req.Description,
		AllowedHosts: req.AllowedHosts, CreatedAt: s.now().UTC(), ExpiresAt: req.ExpiresAt.UTC(), Versions: []store.SecretVersion{v}}
	if err := s.st.CreateSecret(ctx, sec); err != nil {
		return nil, err
	}
	return sec, nil
}

// Get returns owner's secret (metadata; values stay sealed).
func (s *Service) Get(ctx context.Context, owner, name string) (*store.Secret, error) {
	sec, err := s.st.GetSecret(ctx, owner, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("secret %q not found", name)
	}
	return sec, err
}

// List lists owner's secrets.
func (s *Service) List(ctx context.Context, owner string) ([]*store.Secret, error) {
	return s.st.ListSecrets(ctx, owner)
}

// Rotate adds a new version with value: sandboxes and executions started from now on
// take it; running processes keep the one they started with until they restart.
func (s *Service) Rotate(ctx context.Context, owner, name string, value []byte) (*store.Secret, error) {
	value, err := CleanValue(value)
	if err != nil {
		return nil, err
	}
	for {
		sec, err := s.Get(ctx, owner, name)
		if err != nil {
			return nil, err
		}
		if !sec.RevokedAt.IsZero() {
			return nil, errdefs.Precondition("secret %q is revoked; create a new one", name)
		}
		v, err := s.version(sec.Versions[len(sec.Versions)-1].Version+1, sec.Type, value)
		if err != nil {
			return nil, err
		}
		sec.Versions = append(sec.Versions, v)
		err = s.st.UpdateSecret(ctx, sec)
		if errors.Is(err, errdefs.ErrVersionConflict) {
			continue // another rotation came first: this one becomes the next version
		}
		return sec, err
	}
}

// Revoke stops every delivery of the secret at once; its values are destroyed.
func (s *Service) Revoke(ctx context.Context, owner, name string) (*store.Secret, error) {
	for {
		sec, err := s.Get(ctx, owner, name)
		if err != nil || !sec.RevokedAt.IsZero() {
			return sec, err
		}
		sec.RevokedAt = s.now().UTC()
		for i := range sec.Versions {
			sec.Versions[i].Sealed = nil // nothing left to deliver, or to steal
		}
		err = s.st.UpdateSecret(ctx, sec)
		if errors.Is(err, errdefs.ErrVersionConflict) {
			continue
		}
		if err == nil {
			s.changed(owner, "")
		}
		return sec, err
	}
}

// Delete revokes the secret (delivery stops at once) and then removes it, with every
// binding; its name can be used again.
func (s *Service) Delete(ctx context.Context, owner, name string) error {
	if _, err := s.Revoke(ctx, owner, name); err != nil {
		return err
	}
	err := s.st.DeleteSecret(ctx, owner, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.NotFound("secret %q not found", name)
	}
	return err
}

// Rekey seals every secret's every version, and every volume's data key, under a new
// key, then forgets the old keys.
// Until it ends, both keys open; an interrupted rekey is finished by the next one.
func (s *Service) Rekey(ctx context.Context) (int, error) {
	s.rekeying.Lock()
	defer s.rekeying.Unlock()
	s.mu.Lock()
	id := fmt.Sprintf("k%d", time.Now().UnixNano())
	s.ring.Keys[id] = randomBytes(32)
	s.ring.Current = id
	if err := s.saveRing(); err != nil {
		s.mu.Unlock()
		return 0, err
	}
	s.mu.Unlock()
	all, err := s.st.ListSecrets(ctx, "")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sec := range all {
		for {
			changed := false
			s.mu.RLock()
			for i, v := range sec.Versions {
				if v.Sealed == nil || v.KeyID == id {
					continue
				}
				plain, err := s.open(v)
				if err == nil {
					sec.Versions[i].Sealed, err = s.seal(id, plain)
					sec.Versions[i].KeyID = id
					clear(plain)
				}
				if err != nil {
					s.mu.RUnlock()
					return n, fmt.Errorf("rekey secret %s of %s: %w", sec.Name, sec.Owner, err)
				}
				changed = true
			}
			s.mu.RUnlock()
			if !changed {
				break
			}
			err := s.st.UpdateSecret(ctx, sec)
			if errors.Is(err, errdefs.ErrVersionConflict) {
				if sec, err = s.st.GetSecret(ctx, sec.Owner, sec.Name); err != nil {
					return n, err
				}
				continue
			}
			if err != nil {
				return n, err
			}
			n++
			break
		}
	}
	if _, err := s.rekeyVolumes(ctx, id); err != nil {
		return n, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.ring.Keys {
		if k != id {
			delete(s.ring.Keys, k)
		}
	}
	return n, s.saveRing()
}

// Value opens version (0: the newest) of owner's secret, for delivery only.
func (s *Service) Value(ctx context.Context, owner, name string, version int) ([]byte, error) {
	sec, err := s.Get(ctx, owner, name)
	if err != nil {
		return nil, err
	}
	if !sec.RevokedAt.IsZero() {
		return nil, errdefs.Precondition("secret %q is revoked", name)
	}
	if !sec.ExpiresAt.IsZero() && !s.now().Before(sec.ExpiresAt) {
		return nil, errdefs.Precondition("secret %q expired at %s", name, sec.ExpiresAt.Format(time.RFC3339))
	}
	v := sec.Versions[len(sec.Versions)-1]
	if version > 0 {
		i := slices.IndexFunc(sec.Versions, func(v store.SecretVersion) bool { return v.Version == version })
		if i < 0 {
			return nil, errdefs.NotFound("secret %q has no version %d", name, version)
		}
		v = sec.Versions[i]
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.open(v)
}

// The records the service hands out, named here so that its callers (the HTTP edge)
// need not import the store.
type (
	Secret  = store.Secret
	Version = store.SecretVersion
)

// SealKey seals a data key (a volume's) under the node's current secret key, as a
// secret's value is sealed; the store keeps only what it returns.
func (s *Service) SealKey(key []byte) (keyID string, sealed []byte, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	sealed, err = s.seal(s.ring.Current, key)
	return s.ring.Current, sealed, err
}

// OpenKey opens a data key SealKey sealed.
func (s *Service) OpenKey(keyID string, sealed []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.open(store.SecretVersion{KeyID: keyID, Sealed: sealed})
}

// rekeyVolumes seals every volume's data key under the key id (the data keys, and so
// the volumes' contents, do not change), and says how many it sealed again.
func (s *Service) rekeyVolumes(ctx context.Context, id string) (int, error) {
	all, err := s.st.ListVolumes(ctx, "", "")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range all {
		for v.KeyID != id {
			plain, err := s.OpenKey(v.KeyID, v.Key)
			if err == nil {
				v.KeyID, v.Key, err = s.SealKey(plain)
				clear(plain)
			}
			if err != nil {
				return n, fmt.Errorf("rekey volume %s of %s: %w", v.Name, v.Owner, err)
			}
			err = s.st.UpdateVolume(ctx, v)
			if errors.Is(err, errdefs.ErrVersionConflict) {
				if v, err = s.st.GetVolume(ctx, v.ID); err != nil {
					return n, err
				}
				continue
			}
			if err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

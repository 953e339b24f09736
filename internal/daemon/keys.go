package daemon

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/store"
)

// nodeKeys are the keys the node uses, from keys_dir (or the state directory).
type nodeKeys struct {
	dir     string
	audit   []byte
	secrets *secret.Service
	e2b     []byte // nil without e2b_listen
}

// loadKeys reads the node's keys, making those that are missing.
func loadKeys(cfg config.Config, st store.Store) (*nodeKeys, error) {
	k := new(nodeKeys)
	var err error
	if k.dir, err = keysDir(cfg); err != nil {
		return nil, err
	}
	if k.audit, err = audit.LoadKey(filepath.Join(k.dir, "audit.key")); err != nil {
		return nil, err
	}
	if k.secrets, err = secret.Open(st, filepath.Join(k.dir, "secret.key")); err != nil {
		return nil, err
	}
	if cfg.E2BListen != "" {
		if k.e2b, err = e2bTokenKey(k.dir); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// keyCheck is the label a key's fingerprint is keyed over.
const keyCheck = "airlock key-check\x00"

// fingerprints are the keys' fingerprints by file name: an HMAC of a fixed label under
// each key, which tells nothing of the key.
func (k *nodeKeys) fingerprints() map[string]string {
	mac := func(key []byte, name string) string {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(keyCheck + name))
		return hex.EncodeToString(h.Sum(nil))
	}
	fp := map[string]string{
		"audit.key":  mac(k.audit, "audit.key"),
		"secret.key": hex.EncodeToString(k.secrets.KeyCheck("secret.key")),
	}
	if k.e2b != nil {
		fp["e2b-token.key"] = mac(k.e2b, "e2b-token.key")
	}
	return fp
}

// checkClusterKeys compares the node's keys with those of the nodes that came first to
// its store (the first node records its own): a node whose keys differ would write an
// audit chain the others cannot verify, or secrets and tokens they cannot open, so it
// is refused, naming the key and what to do.
func checkClusterKeys(ctx context.Context, st store.Store, cfg config.Config, k *nodeKeys) error {
	fps := k.fingerprints()
	for _, name := range []string{"audit.key", "secret.key", "e2b-token.key"} {
		fp, ok := fps[name]
		if !ok {
			continue
		}
		stored, err := st.ClaimClusterKey(ctx, name, fp)
		if err != nil {
			return fmt.Errorf("check the cluster's keys: %w", err)
		}
		if stored == fp {
			continue
		}
		todo := fmt.Sprintf("copy audit.key, secret.key and e2b-token.key from the cluster's keys_dir on one of its nodes into cluster.keys_dir %s (files mode 600)", k.dir)
		if cfg.Cluster.KeysDir == "" {
			todo = "set cluster.keys_dir to a copy of the cluster's keys_dir from one of its nodes (mode 700, files 600)"
		}
		return fmt.Errorf("%s in %s is not the key the other nodes of this store use, and every node of one store must share them: %s, then start again", name, k.dir, todo)
	}
	return nil
}

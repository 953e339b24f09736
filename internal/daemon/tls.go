package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// certFiles serves the certificate of tls_cert and tls_key, read again when either file
// changes (its inode, size or modification time), so a renewed certificate takes effect
// without a restart. A reload that fails keeps the last good pair and logs why, once
// for each version of the files.
type certFiles struct {
	cert, key string
	log       *slog.Logger

	mu     sync.Mutex
	stamp  [2]fileStamp
	failed [2]fileStamp // the stamps a reload last failed at
	pair   *tls.Certificate
}

// fileStamp tells one version of a file from the next: a renewal written to a new file
// and renamed into place has a new inode even within one tick of the file clock.
type fileStamp struct {
	ino  uint64
	size int64
	mod  time.Time
}

// openCertFiles checks the files as it checks every file it is configured with (root's,
// writable by root alone) and loads the pair (load).
func openCertFiles(cert, key string, log *slog.Logger) (*certFiles, error) {
	for _, f := range []struct{ path, what string }{{cert, "tls_cert"}, {key, "tls_key"}} {
		if err := TrustedFile(f.path, f.what); err != nil {
			return nil, err
		}
	}
	c := &certFiles{cert: cert, key: key, log: log}
	stamp, err := c.stamps()
	if err != nil {
		return nil, err
	}
	if err := c.load(stamp); err != nil {
		return nil, err
	}
	return c, nil
}

// load reads the pair as of stamp, refusing a key other users may read.
func (c *certFiles) load(stamp [2]fileStamp) error {
	fi, err := os.Stat(c.key)
	if err != nil {
		return fmt.Errorf("tls_key: %w", err)
	}
	if mode := fi.Mode().Perm(); mode&0o077 != 0 {
		return fmt.Errorf("tls_key %s has mode %s: users other than root may read the key (chmod 600 %s)", c.key, strconv.FormatUint(uint64(mode), 8), c.key)
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return fmt.Errorf("tls_cert and tls_key: %w", err)
	}
	c.stamp, c.pair = stamp, &pair
	return nil
}

func (c *certFiles) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, p := range []string{c.cert, c.key} {
		fi, err := os.Stat(p)
		if err != nil {
			return out, err
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		out[i] = fileStamp{ino, fi.Size(), fi.ModTime()}
	}
	return out, nil
}

// get is tls.Config.GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stamp, err := c.stamps()
	if err != nil || stamp == c.stamp || stamp == c.failed {
		return c.pair, nil
	}
	if err := c.load(stamp); err != nil {
		c.failed = stamp
		c.log.Warn("tls_cert and tls_key changed but do not load; serving the certificate loaded before", "err", err)
		return c.pair, nil
	}
	c.log.Info("loaded the renewed TLS certificate", "tls_cert", c.cert)
	return c.pair, nil
}

func (c *certFiles) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get}
}

// serveTCP serves hs on l: HTTPS when hs has a TLS configuration, else plain HTTP.
func serveTCP(hs *http.Server, l net.Listener) error {
	if hs.TLSConfig == nil {
		return hs.Serve(l)
	}
	return hs.ServeTLS(l, "", "")
}

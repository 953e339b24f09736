package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSettingsAreTypedOnce(t *testing.T) {
	s, err := Default().Settings()
	if err != nil {
		t.Fatal(err)
	}
	if s.DefaultMemory != 1<<30 || s.ExecOutputBudget != 64<<20 || s.MaxLifetime != 8*time.Hour ||
		s.AuditCoalesce != 10*time.Second || s.MemoryTarget != 192<<20 || s.ImageQuota != 20<<30 ||
		s.FileUpload != 1<<30 || s.TreeEntries != 500_000 || s.TreeBytes != 8<<30 {
		t.Errorf("default settings %+v", s)
	}
	c := Default()
	c.DefaultLimits.Memory, c.MaxLifetime, c.Audit.EventMaxAge = "lots", "30s", "1m"
	if _, err := c.Settings(); err == nil ||
		!strings.Contains(err.Error(), "default_limits.memory") || !strings.Contains(err.Error(), "max_lifetime") ||
		!strings.Contains(err.Error(), "audit.event_max_age") {
		t.Errorf("a config with three bad values: %v; want each named", err)
	}
	c = Default()
	c.DefaultLimits.Disk = "1GB"
	if s, err := c.Settings(); err != nil || s.DefaultDisk != 1<<30 {
		t.Errorf("1GB: %d, %v; want 1GiB, as docker reads it", s.DefaultDisk, err)
	}
}

func TestRouterConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, yaml, wantErr string
		wantProfile         string
		wantThreshold       float64
	}{
		{"default", "", "", "", 0.5},
		{"profile and threshold", "router: {profile: strict, threshold: 0.7}\n", "", "strict", 0.7},
		{"no default profile", "router: {profile: \"\"}\n", "", "", 0.5},
		{"unknown profile", "router: {profile: paranoid}\n", `router.profile "paranoid" must be off, safe, strict`, "", 0},
		{"custom is no profile to set", "router: {profile: custom}\n", `router.profile "custom"`, "", 0},
		{"threshold zero", "router: {threshold: 0}\n", "router.threshold 0 must be", "", 0},
		{"threshold above one", "router: {threshold: 1.5}\n", "router.threshold 1.5 must be", "", 0},
		{"unknown key", "router: {profil: safe}\n", "field profil not found", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Load(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load: %v; want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.Router.Profile != tc.wantProfile || c.Router.Threshold != tc.wantThreshold {
				t.Errorf("router = %+v; want profile %q, threshold %v", c.Router, tc.wantProfile, tc.wantThreshold)
			}
		})
	}
}

// loadCase is a configuration file and what Load says of it ("": no error).
type loadCase struct{ name, yaml, wantErr string }

func checkLoads(t *testing.T, cases []loadCase) {
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Load: %v; want %q", err, tc.wantErr)
			}
		})
	}
}

func TestE2BConfig(t *testing.T) {
	checkLoads(t, []loadCase{
		{"listen and domain", "e2b_listen: 127.0.0.1:3000\ne2b_domain: sandboxes.example.com\n", ""},
		{"one-label domain", "e2b_domain: localhost\n", ""},
		{"domain with a port", "e2b_domain: example.com:80\n", `e2b_domain "example.com:80" must be a DNS name`},
		{"domain with a leading dot", "e2b_domain: .example.com\n", `e2b_domain ".example.com" must be a DNS name`},
		{"listen without a port", "e2b_listen: 127.0.0.1\n", `e2b_listen "127.0.0.1" must be HOST:PORT`},
	})
}

func TestObjectsConfig(t *testing.T) {
	const ok = "objects: {endpoint: https://s3.example.com, bucket: airlock, access_key_env: AK, secret_key_env: SK"
	checkLoads(t, []loadCase{
		{"none", "", ""},
		{"keys from the environment", ok + ", prefix: cluster/a/}\n", ""},
		{"credentials file and CA", "objects: {endpoint: https://s3.example.com:9000, bucket: my.bucket, credentials_file: /etc/airlock/s3, ca_file: /etc/airlock/ca.pem}\n", ""},
		{"plain http", "objects: {endpoint: http://10.0.0.5:8333, bucket: airlock, credentials_file: /etc/airlock/s3}\n", ""},
		{"no endpoint", "objects: {bucket: airlock, credentials_file: /etc/airlock/s3}\n", `objects.endpoint "" must be https://`},
		{"endpoint with a path", "objects: {endpoint: https://s3.example.com/x, bucket: airlock, credentials_file: /etc/s3}\n", `objects.endpoint "https://s3.example.com/x"`},
		{"endpoint with keys", "objects: {endpoint: https://a:b@s3.example.com, bucket: airlock, credentials_file: /etc/s3}\n", `objects.endpoint`},
		{"other scheme", "objects: {endpoint: ftp://s3.example.com, bucket: airlock, credentials_file: /etc/s3}\n", `objects.endpoint "ftp://s3.example.com"`},
		{"CA over http", "objects: {endpoint: http://s3.example.com, bucket: airlock, credentials_file: /etc/s3, ca_file: /etc/ca.pem}\n", "objects.ca_file is for an https://"},
		{"bad bucket", "objects: {endpoint: https://s3.example.com, bucket: Air_Lock, credentials_file: /etc/s3}\n", `objects.bucket "Air_Lock"`},
		{"no credentials", "objects: {endpoint: https://s3.example.com, bucket: airlock}\n", "objects needs credentials"},
		{"both credentials", ok + ", credentials_file: /etc/s3}\n", "not both"},
		{"half the keys", "objects: {endpoint: https://s3.example.com, bucket: airlock, access_key_env: AK}\n", `objects.access_key_env "AK" and secret_key_env ""`},
		{"relative credentials file", "objects: {endpoint: https://s3.example.com, bucket: airlock, credentials_file: s3}\n", `objects.credentials_file "s3" must be an absolute path`},
		{"prefix without a slash", ok + ", prefix: cluster}\n", `objects.prefix "cluster"`},
		{"prefix escaping", ok + ", prefix: ../}\n", `objects.prefix "../"`},
		{"unknown key", ok + ", secret_key: x}\n", "field secret_key not found"},
	})
}

// TestLimitsAndPathsAreChecked: values the API would refuse of a create (or that mean
// no limit at all to the runtime: zero, NaN) are refused as defaults too, and paths
// that would hide one another or depend on the working directory are refused.
func TestLimitsAndPathsAreChecked(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct{ yaml, wantErr string }{
		{"default_limits: {cpu: .nan}\n", "default_limits.cpu NaN"},
		{"default_limits: {cpu: .inf}\n", "default_limits.cpu +Inf"},
		{"default_limits: {cpu: 0}\n", "default_limits.cpu 0"},
		{"default_limits: {cpu: 1000}\n", "default_limits.cpu 1000"},
		{"default_limits: {memory: \"0\"}\n", `default_limits.memory "0"`},
		{"default_limits: {memory: 1TiB}\n", `default_limits.memory "1TiB"`},
		{"default_limits: {disk: \"0\"}\n", `default_limits.disk "0"`},
		{"default_limits: {pids: 0}\n", "default_limits.pids 0"},
		{"default_limits: {pids: -1}\n", "default_limits.pids -1"},
		{"default_limits: {open_files: 0}\n", "default_limits.open_files 0"},
		{"tmpfs_size: \"0\"\n", `tmpfs_size "0"`},
		{"files: {max_upload: 1KiB}\n", `files.max_upload "1KiB" must be a size of at least 1MiB`},
		{"volume_quota: lots\n", `volume_quota "lots" must be a size of at least 1MiB`},
		{"audit: {rate: .nan}\n", "audit.rate (NaN)"},
		{"state_dir: /srv/al\nsecrets_dir: /srv/al/..s\n", "must be outside each other"},
		{"state_dir: /srv/al/secrets/state\nsecrets_dir: /srv/al/secrets\n", "must be outside each other"},
		{"state_dir: /srv/al\nsecrets_dir: /srv/al\n", "must be outside each other"},
		{"secrets_dir: /run/al/secrets\nsocket: /run/al/secrets/api.sock\n", "must be outside secrets_dir"},
		{"runc: runc\n", `runc "runc" must be an absolute path`},
		{"runsc: ./runsc\n", `runsc "./runsc" must be an absolute path`},
		{"roles_file: roles.yaml\n", `roles_file "roles.yaml" must be an absolute path`},
		{"tls_cert: /etc/al/cert.pem\n", "tls_cert and tls_key go together"},
		{"tls_cert: cert.pem\ntls_key: /etc/al/key.pem\n", `tls_cert "cert.pem" must be an absolute path`},
		{"network: {extra_cas: [ca.pem]}\n", `network.extra_cas[0] "ca.pem" must be an absolute path`},
		{"network: {new_connections_per_second: -1}\n", "network.new_connections_per_second -1 must be from 1 to 1000000 (0: 200)"},
		{"network: {node_new_connections_per_second: 2000000}\n", "network.node_new_connections_per_second 2000000 must be from 1"},
		{"pools: [{name: Py, size: 1}]\n", `pools[0]: name "Py" must be`},
		{"pools: [{name: py, size: 257}]\n", "pools[0]: size 257 must be from 0 to 256"},
		{"pools: [{name: py, size: 1}, {name: py, size: 2}]\n", `pools[1]: name "py" is given twice`},
		{"pools: [{name: py, size: 1, network: open}]\n", `pools[0]: network "open" must be`},
		{"pools: [{name: py, size: 1, limits: {memory: lots}}]\n", `pools[0]: limits.memory "lots"`},
		// Fine:
		{"pools: [{name: py, image: python, size: 4, network: none, limits: {cpu: 1, memory: 512MiB}}]\n", ""},
		{"network: {new_connections_per_second: 50, node_new_connections_per_second: 500}\n", ""},
		{"state_dir: /srv/al\nsecrets_dir: /srv/al..s\nrunsc: \"off\"\nrunc: /usr/sbin/runc\n", ""},
		{"default_limits: {cpu: 0.5, memory: 16MiB, pids: 8, open_files: 64, disk: 64MiB}\ntmpfs_size: 1MiB\n", ""},
		{"files: {max_upload: 8GiB}\n", ""},
		{"default_limits: {cpu: 64, memory: 256GiB, pids: 1048576, open_files: 1048576, disk: 1TiB}\n", ""},
	} {
		path := filepath.Join(dir, "c"+strconv.Itoa(i)+".yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%q: Load: %v; want %q", tc.yaml, err, tc.wantErr)
		}
	}
}

// TestStoreDSN: store.dsn is empty (SQLite) or a PostgreSQL URL; a wrong one is refused
// with what is allowed, and neither the refusal nor the configuration printed in any
// way shows its password.
func TestStoreDSN(t *testing.T) {
	const pw = "Pa55-word"
	for _, tc := range []struct{ dsn, wantErr string }{
		{"", ""},
		{"postgres://airlock:" + pw + "@db.example.com:5432/airlock?sslmode=verify-full", ""},
		{"postgresql://airlock@db.example.com/airlock", ""},
		{"mysql://airlock:" + pw + "@db.example.com/airlock", "must be a PostgreSQL URL"},
		{"host=db.example.com password=" + pw, "must be a PostgreSQL URL"},
		{"postgres://airlock:" + pw + "@/airlock", "must name the database's host"},
		{"postgres://airlock@db.example.com/airlock?password=" + pw, "password in the user part"},
	} {
		c := Default()
		c.Store.DSN = DSN(tc.dsn)
		err := c.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("store.dsn %q: got error %v, want none", tc.dsn, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("store.dsn %q: got error %v, want one saying %q", tc.dsn, err, tc.wantErr)
		case err != nil && strings.Contains(err.Error(), pw):
			t.Errorf("store.dsn %q: got error %q, which holds the password", tc.dsn, err)
		}
	}

	c := Default()
	c.Store.DSN = DSN("postgres://airlock:" + pw + "@db.example.com/airlock")
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), string(js)} {
		if strings.Contains(out, pw) || !strings.Contains(out, "airlock:xxxxx@db.example.com") {
			t.Errorf("the configuration printed: %s; want its DSN with the password replaced by xxxxx", out)
		}
	}
}

package sweep

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/bindsource"
)

func TestRecordValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Record
		want string // "" for valid; else a part of the error
	}{
		{"node", Record{CgroupParents: []string{"airlock", "airlock-runsc"}, Runtimes: []Runtime{{"runc", "/var/lib/airlock/runc"}},
			Table: "airlock", VethPrefix: "al", SecretsDir: "/run/airlock/secrets"}, ""},
		{"parent up", Record{CgroupParents: []string{"../system.slice"}}, "cgroup parent"},
		{"parent absolute", Record{CgroupParents: []string{"/airlock"}}, "cgroup parent"},
		{"parent dot", Record{CgroupParents: []string{"a/./b"}}, "cgroup parent"},
		{"root relative", Record{Runtimes: []Runtime{{"runc", "runc"}}}, "runtime root"},
		{"root unclean", Record{Runtimes: []Runtime{{"runc", "/x/../etc"}}}, "runtime root"},
		{"table", Record{Table: "a b"}, "nftables table"},
		{"veth prefix long", Record{VethPrefix: "abcdefgh"}, "veth prefix"},
		{"secrets root", Record{SecretsDir: "/"}, "secrets directory"},
	} {
		err := tc.r.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate() = %v; want %q", tc.name, err, tc.want)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := Record{CgroupParents: []string{"p"}, Runtimes: []Runtime{{"runc", "/s/runc"}}, Table: "t", VethPrefix: "v", SecretsDir: "/s2"}
	if err := WriteRecord(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecord(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadRecord = %+v, %v; want %+v", got, err, want)
	}
	os.WriteFile(filepath.Join(dir, RecordName), []byte(`{"cgroup_parents":["../x"]}`), 0o600)
	if _, err := ReadRecord(dir); err == nil {
		t.Errorf("ReadRecord of a record naming ../x succeeded; want an error")
	}
	if err := WriteRecord(dir, Record{Table: "bad table"}); err == nil {
		t.Errorf("WriteRecord of an invalid record succeeded")
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a/b`: "/a/b", `/a\040b`: "/a b", `/a\134b`: `/a\b`, `/a\04`: `/a\04`} {
		if got := bindsource.UnescapeMount(in); got != want {
			t.Errorf("UnescapeMount(%q) = %q; want %q", in, got, want)
		}
	}
}

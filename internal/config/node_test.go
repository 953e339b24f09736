package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNodeSettings(t *testing.T) {
	token := JoinToken(strings.Repeat("ab", 16))
	for _, tc := range []struct {
		name    string
		node    Node
		token   JoinToken
		wantErr string
		want    NodeSetting
	}{
		{name: "none: the host's name, alone", want: NodeSetting{LeasePeriod: 5 * time.Second}},
		{name: "named", node: Node{Name: "edge-1", LeasePeriod: "2s"}, want: NodeSetting{Name: "edge-1", LeasePeriod: 2 * time.Second}},
		{name: "listening", node: Node{Name: "n1", Listen: "10.0.0.5:7443"}, token: token,
			want: NodeSetting{Name: "n1", Listen: "10.0.0.5:7443", Advertise: "10.0.0.5:7443", LeasePeriod: 5 * time.Second}},
		{name: "bad name", node: Node{Name: "Edge_1"}, wantErr: `node.name "Edge_1" must be 1 to 63 lowercase letters`},
		{name: "bad lease", node: Node{Name: "n1", LeasePeriod: "100ms"}, wantErr: "node.lease_period"},
		{name: "no port", node: Node{Name: "n1", Listen: "10.0.0.5"}, token: token, wantErr: `node.listen "10.0.0.5" must be HOST:PORT`},
		{name: "every address, nothing advertised", node: Node{Name: "n1", Listen: "0.0.0.0:7443"}, token: token, wantErr: "node.advertise must be set"},
		{name: "advertise unspecified", node: Node{Name: "n1", Listen: ":7443", Advertise: "[::]:7443"}, token: token, wantErr: `node.advertise "[::]:7443" must be HOST:PORT`},
		{name: "advertise without listen", node: Node{Name: "n1", Advertise: "n1:7443"}, wantErr: "node.advertise \"n1:7443\" needs node.listen"},
		{name: "listen without token", node: Node{Name: "n1", Listen: "10.0.0.5:7443"}, wantErr: "node.listen needs cluster.join_token"},
		{name: "labelled", node: Node{Name: "n1", Labels: map[string]string{"zone": "eu-1", "gpu": "yes"}},
			want: NodeSetting{Name: "n1", LeasePeriod: 5 * time.Second, Labels: map[string]string{"zone": "eu-1", "gpu": "yes"}}},
		{name: "bad label key", node: Node{Name: "n1", Labels: map[string]string{"-zone": "a"}}, wantErr: `node.labels: invalid label key "-zone": 1 to 64 letters`},
		{name: "bad label value", node: Node{Name: "n1", Labels: map[string]string{"zone": "a\nb"}}, wantErr: `node.labels: invalid value for label "zone": at most 256 characters on one line`},
		{name: "memory", node: Node{Name: "n1", Memory: "2TiB"}, want: NodeSetting{Name: "n1", LeasePeriod: 5 * time.Second, Memory: 2 << 40}},
		{name: "bad memory", node: Node{Name: "n1", Memory: "lots"}, wantErr: `node.memory "lots" must be a size of at least 64MiB`},
		{name: "short token", node: Node{Name: "n1"}, token: "hunter2-hunter2", wantErr: "cluster.join_token has 15 characters, fewer than 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Node, c.Cluster.JoinToken = tc.node, tc.token
			s, err := c.Settings()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Settings: %v, want an error with %q", err, tc.wantErr)
				}
				if tc.token != "" && strings.Contains(err.Error(), string(tc.token)) {
					t.Fatalf("the error %q repeats the join token", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Settings: %v", err)
			}
			if tc.want.Name == "" {
				tc.want.Name, _ = hostNodeName()
			}
			if !reflect.DeepEqual(s.Node, tc.want) {
				t.Fatalf("node settings %+v, want %+v", s.Node, tc.want)
			}
		})
	}
}

func TestJoinTokenNeverPrints(t *testing.T) {
	c := Default()
	c.Cluster.JoinToken = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t"
	for _, out := range []string{fmt.Sprint(c.Cluster), fmt.Sprintf("%+v %#v", c, c.Cluster)} {
		if strings.Contains(out, "s3cr3t") {
			t.Fatalf("the join token prints: %s", out)
		}
	}
}

func TestJoinTokenFromEnv(t *testing.T) {
	path := t.TempDir() + "/c.yaml"
	if err := os.WriteFile(path, []byte("node: {name: n1, listen: '10.0.0.5:7443'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(JoinTokenEnv, "")
	if _, err := Load(path); err == nil {
		t.Fatal("node.listen without a join token loaded")
	}
	t.Setenv(JoinTokenEnv, strings.Repeat("x", 40))
	c, err := Load(path)
	if err != nil || string(c.Cluster.JoinToken) != strings.Repeat("x", 40) {
		t.Fatalf("Load with %s set: %v; want the token taken from it", JoinTokenEnv, err)
	}
}

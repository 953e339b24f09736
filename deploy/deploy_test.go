// Package deploy checks the deployment files: every Kubernetes manifest decodes
// strictly into Kubernetes' own API types, and the daemon configurations in them and in
// systemd/ pass the daemon's own loader.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// strict decodes YAML into the registered API types; an unknown or duplicate field is
// an error.
var strict = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// decodeAll decodes every document of data strictly.
func decodeAll(data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

// manifests decodes every file in kubernetes/, by file name.
func manifests(t *testing.T) map[string][]runtime.Object {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/ (%v)", err)
	}
	out := map[string][]runtime.Object{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeAll(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(objs) == 0 {
			t.Errorf("%s: no objects", f)
		}
		out[filepath.Base(f)] = objs
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	var ds *appsv1.DaemonSet
	var cm *corev1.ConfigMap
	var svc *corev1.Service
	secrets := map[string]*corev1.Secret{}
	for file, objs := range manifests(t) {
		for _, o := range objs {
			switch o := o.(type) {
			case *corev1.Namespace:
				continue
			case *appsv1.DaemonSet:
				ds = o
			case *corev1.ConfigMap:
				cm = o
			case *corev1.Secret:
				secrets[o.Name] = o
			case *corev1.Service:
				if o.Name == "airlock-api" {
					svc = o
				}
			}
			if ns := o.(interface{ GetNamespace() string }).GetNamespace(); ns != "airlock" {
				t.Errorf("%s: %T in namespace %q, not airlock", file, o, ns)
			}
		}
	}
	if ds == nil || cm == nil || svc == nil {
		t.Fatalf("want a DaemonSet, a ConfigMap and the airlock-api Service; got %v, %v, %v", ds != nil, cm != nil, svc != nil)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("the daemon's container is not privileged")
	}
	if !spec.HostPID {
		t.Error("the DaemonSet does not share the host's PID namespace: sandboxes would die with the daemon's container")
	}
	// Every Secret the pods name exists, with the key they read.
	for _, e := range append(c.Env, spec.InitContainers[0].Env...) {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			s, ok := secrets[ref.SecretKeyRef.Name]
			if _, has := s.StringData[ref.SecretKeyRef.Key]; !ok || !has {
				t.Errorf("env %s reads secret %s key %s, which the manifests do not have", e.Name, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.DefaultMode != nil && *v.Secret.DefaultMode != 0o600 {
			t.Errorf("secret volume %s has mode %o, want 600", v.Name, *v.Secret.DefaultMode)
		}
		if v.ConfigMap != nil && v.ConfigMap.Name != cm.Name {
			t.Errorf("volume %s names ConfigMap %s, not %s", v.Name, v.ConfigMap.Name, cm.Name)
		}
	}
	// The daemon's config, as the init container renders it, passes the daemon's own
	// loader, and its ports are the container's and the Service's.
	cfg := loadConfig(t, render(cm.Data["airlock.yaml"], "worker-1", "10.244.1.7"))
	if cfg.Node.Name != "worker-1" || cfg.Node.Advertise != "10.244.1.7:7443" {
		t.Errorf("rendered node %q advertising %q", cfg.Node.Name, cfg.Node.Advertise)
	}
	ports := map[string]string{}
	for _, p := range c.Ports {
		ports[p.Name] = ":" + strconv.Itoa(int(p.ContainerPort))
	}
	if !strings.HasSuffix(cfg.Listen, ports["api"]) || !strings.HasSuffix(cfg.Node.Listen, ports["cluster"]) {
		t.Errorf("config listens on %s and %s; the container's ports are %v", cfg.Listen, cfg.Node.Listen, ports)
	}
	if svc.Spec.Ports[0].TargetPort.StrVal != "api" {
		t.Errorf("the Service targets %v, not the api port", svc.Spec.Ports[0].TargetPort)
	}
	if len(svc.Spec.Selector) == 0 {
		t.Error("the Service selects nothing")
	}
	for k, v := range svc.Spec.Selector {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the DaemonSet's pods do not carry", k, v)
		}
	}
}

// render fills the placeholders as the DaemonSet's init container does.
func render(s, name, ip string) string {
	return strings.NewReplacer("@NODE_NAME@", name, "@POD_IP@", ip).Replace(s)
}

// loadConfig loads a daemon config with the daemon's own loader, with a join token
// in the environment as the deployments give it.
func loadConfig(t *testing.T, text string) config.Config {
	t.Helper()
	t.Setenv(config.JoinTokenEnv, strings.Repeat("ab", 32))
	p := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatalf("the daemon refuses the config: %v", err)
	}
	return cfg
}

func TestSystemdConfigLoads(t *testing.T) {
	data, err := os.ReadFile("systemd/airlock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, string(data))
	if cfg.Store.DSN == "" || cfg.Objects.Endpoint == "" || cfg.Node.Listen == "" || cfg.Cluster.KeysDir == "" {
		t.Errorf("the example leaves out store, objects, node or cluster: %+v", cfg)
	}
	unit, err := os.ReadFile("systemd/airlockd.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/bin/airlockd serve --config /etc/airlock/airlock.yaml", "EnvironmentFile=/etc/airlock/airlock.env", "KillMode=process", "Delegate=yes"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("airlockd.service lacks %q", want)
		}
	}
}

// A typo is caught: an unknown field, or a field twice, is refused, in a manifest and
// in the daemon's config.
func TestTyposAreRefused(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  selectr: {app: x}\n",
		"duplicate":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"nested":        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostPid: true\n",
	} {
		if _, err := decodeAll([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	if _, err := decodeAll([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  selector: {app: x}\n")); err != nil {
		t.Errorf("the same Service spelt right is refused: %v", err)
	}
	t.Setenv(config.JoinTokenEnv, strings.Repeat("ab", 32))
	p := filepath.Join(t.TempDir(), "airlock.yaml")
	os.WriteFile(p, []byte("node:\n  name: a\n  lease_perid: 5s\n"), 0o600)
	if _, err := config.Load(p); err == nil {
		t.Error("the daemon's loader took an unknown key")
	}
}

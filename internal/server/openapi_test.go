package server

import (
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/airlockhq/airlock/api"
)

// TestRoutesMatchSpec fails when a route the server serves and api/openapi.yaml disagree.
func TestRoutesMatchSpec(t *testing.T) {
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml does not parse: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi version = %q; want 3.1.x", doc.OpenAPI)
	}
	methods := []string{"get", "put", "post", "delete", "patch", "head", "options"}
	var spec []string
	for path, item := range doc.Paths {
		for m := range item {
			if slices.Contains(methods, m) {
				spec = append(spec, strings.ToUpper(m)+" "+path)
			}
		}
	}
	var served []string
	for _, r := range (&Server{}).Routes() {
		// OpenAPI has no catch-all segment; the spec writes {rest} for Go's {rest...}.
		served = append(served, strings.ReplaceAll(r, "...}", "}"))
	}
	slices.Sort(spec)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(spec, r) {
			t.Errorf("route %q is served but not in api/openapi.yaml", r)
		}
	}
	for _, r := range spec {
		if !slices.Contains(served, r) {
			t.Errorf("api/openapi.yaml has %q but the server does not serve it", r)
		}
	}
}

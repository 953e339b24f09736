package server

import (
	"os"
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
	sameRoutes(t, "api/openapi.yaml", spec, served)
}

// sameRoutes reports every route of served that doc does not list, and every route
// doc lists that is not served.
func sameRoutes(t *testing.T, doc string, listed, served []string) {
	t.Helper()
	for _, r := range served {
		if !slices.Contains(listed, r) {
			t.Errorf("route %q is served but not in %s", r, doc)
		}
	}
	for _, r := range listed {
		if !slices.Contains(served, r) {
			t.Errorf("%s has %q but the server does not serve it", doc, r)
		}
	}
}

// TestRoutesMatchIndex fails when api/ROUTES.md and the server's route table disagree:
// every row names one or more methods and one path (a query after ? is left aside), and
// together the rows list each route once.
func TestRoutesMatchIndex(t *testing.T) {
	b, err := os.ReadFile("../../api/ROUTES.md")
	if err != nil {
		t.Fatal(err)
	}
	var index []string
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "| ") || strings.TrimSpace(cells[1]) == "method" {
			continue
		}
		path, _, _ := strings.Cut(strings.TrimSpace(cells[2]), "?")
		for _, m := range strings.Split(cells[1], ",") {
			r := strings.TrimSpace(m) + " " + path
			if slices.Contains(index, r) {
				t.Errorf("api/ROUTES.md lists %q twice", r)
			}
			index = append(index, r)
		}
	}
	sameRoutes(t, "api/ROUTES.md", index, (&Server{}).Routes())
}

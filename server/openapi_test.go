package server

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// openAPIPath turns a ServeMux pattern path into its OpenAPI form:
// "/{$}" is "/", "{path...}" is "{path}".
func openAPIPath(p string) string {
	p = strings.TrimSuffix(p, "{$}")
	return regexp.MustCompile(`\{(\w+)\.\.\.\}`).ReplaceAllString(p, "{$1}")
}

// TestOpenAPIMatchesRoutes fails when a route registered in the mux is
// missing from openapi.yaml, or the document lists a route that is not
// registered, or their public/authenticated status differ.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi version %q", doc.OpenAPI)
	}
	methods := map[string]bool{"get": true, "post": true, "put": true, "patch": true, "delete": true, "head": true, "options": true}
	documented := map[string]bool{} // "GET /path"
	public := map[string]bool{}
	for path, ops := range doc.Paths {
		for m, op := range ops {
			if !methods[m] {
				continue // parameters, summary
			}
			op, _ := op.(map[string]any)
			key := strings.ToUpper(m) + " " + path
			documented[key] = true
			if sec, ok := op["security"].([]any); ok && len(sec) == 0 {
				public[key] = true
			}
		}
	}
	registered := map[string]bool{}
	s := New(nil, Options{Token: "x"})
	for _, r := range s.routes() {
		key := r.method + " " + openAPIPath(r.path)
		registered[key] = true
		if !documented[key] {
			t.Errorf("route %s %s is registered but not in openapi.yaml", r.method, r.path)
			continue
		}
		if r.public != public[key] {
			t.Errorf("route %s: public=%v in the mux, %v in openapi.yaml (security: [])", key, r.public, public[key])
		}
	}
	var extra []string
	for key := range documented {
		if !registered[key] {
			extra = append(extra, key)
		}
	}
	slices.Sort(extra)
	for _, key := range extra {
		t.Errorf("openapi.yaml documents %s, which no route serves", key)
	}
	// Every $ref resolves.
	var raw map[string]any
	if err := yaml.Unmarshal(openAPIYAML, &raw); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`"\$ref":"#/components/(\w+)/(\w+)"`).FindAllStringSubmatch(string(b), -1) {
		comp, _ := raw["components"].(map[string]any)
		sec, _ := comp[m[1]].(map[string]any)
		if _, ok := sec[m[2]]; !ok {
			t.Errorf("$ref %s/%s does not resolve", m[1], m[2])
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	code, b := h.call("GET", "/api/openapi.json", nil)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil || doc["openapi"] != "3.1.0" {
		t.Fatalf("served document: %v %.100s", err, b)
	}
}

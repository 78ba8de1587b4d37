package server

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// openAPIYAML documents every route; TestOpenAPIMatchesRoutes keeps it in
// step with routes().
//
//go:embed openapi.yaml
var openAPIYAML []byte

// openAPIJSON returns the OpenAPI document as JSON.
func openAPIJSON() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("parse openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encode openapi document: %w", err)
	}
	return b, nil
}

// Package examples holds vigil's example scenarios, embedded so that the
// vigil binary can run the demo without a checkout.
package examples

import "embed"

// Files holds the example scenario files (*.yaml).
//
//go:embed *.yaml
var Files embed.FS

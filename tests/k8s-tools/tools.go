//go:build tools

// Package tools names the main packages scripts/k8s-build.sh --tools builds, so
// that `go mod tidy` records every module they need. Nothing imports it.
package tools

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/server"
	_ "sigs.k8s.io/metrics-server/cmd/metrics-server"
)

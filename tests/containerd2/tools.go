//go:build tools

// Package tools names the main packages scripts/k8s-build.sh --containerd
// builds, so that `go mod tidy` records every module they need. Nothing imports
// it.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)

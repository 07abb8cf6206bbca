//go:build tools

// Package clustertools exists only so that `go mod tidy` records every module
// kube-proxy's main package needs. scripts/k8s-build.sh --cluster builds
// k8s.io/kubernetes/cmd/kube-proxy from this module; nothing builds this file.
package clustertools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)

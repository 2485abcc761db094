//go:build tools

// Package tools pins the Kubeflow training operator the real-cluster suite runs.
// It lives in a module of its own because it is built against its own Kubernetes
// libraries (v0.31), older than the control plane's (e2e/cluster).
package tools

import (
	_ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
)

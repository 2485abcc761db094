//go:build tools

// Package tools pins KubeRay's operator (ray-operator), which reconciles RayJobs and
// RayClusters into pods: the real-cluster suite runs it with kwok to show our controller
// queues Ray jobs that a real operator runs (tests/kubecluster/test_kuberay.py). A module of
// its own, because KubeRay is built against its own Kubernetes libraries (v0.34), which
// differ from the control plane's (e2e/cluster). KubeRay's go.mod has no replace lines.
package tools

import (
	_ "github.com/ray-project/kuberay/ray-operator"
)

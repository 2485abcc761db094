//go:build tools

// Package tools pins the upstream programs the real-cluster suite builds:
// the Kubernetes control plane, etcd and kwok. There is no code of ours here;
// `go build` of each path below (scripts/build_kube.py) makes the binaries.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)

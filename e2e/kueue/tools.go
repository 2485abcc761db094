//go:build tools

// Package tools pins Kueue, built as its maintainers run it, for the side-by-side bench
// (bench/versus_kueue.py): its scheduler performance test (the runner and minimalkueue,
// test/performance/scheduler) and its manager (cmd/kueue, for the batch Job integration).
// It lives in a module of its own because Kueue is built against its own Kubernetes
// libraries, which differ from the control plane's (e2e/cluster).
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
	_ "sigs.k8s.io/kueue/test/performance/scheduler/minimalkueue"
	_ "sigs.k8s.io/kueue/test/performance/scheduler/runner"
)

//go:build tools

// Package tools pins Koordinator's scheduler and manager (koord-scheduler, koord-manager),
// which the guide's users run beside us and which act on the same ElasticQuotas: the
// real-cluster suite runs them with kwok and the training operator. A module of its own,
// because Koordinator is built against its own Kubernetes libraries (v0.35), which differ
// from the control plane's (e2e/cluster). Koordinator's go.mod pins many modules with
// replace lines, which Go ignores in a dependency: they are repeated in go.mod here, with
// module versions only.
package tools

import (
	_ "github.com/koordinator-sh/koordinator/cmd/koord-manager"
	_ "github.com/koordinator-sh/koordinator/cmd/koord-scheduler"
)

"""The real Kubernetes control plane, built from Go modules (e2e/) and started on this machine."""

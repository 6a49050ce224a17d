//go:build tools

// Package tools names the command build-addon-gomod builds, so that go mod tidy keeps what it
// needs in go.mod and go.sum. Never compiled.
package tools

import (
	_ "sigs.k8s.io/metrics-server/cmd/metrics-server"
)

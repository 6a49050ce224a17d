//go:build tools

// Package tools names the command build-coredns-gomod builds, so that go mod tidy keeps what it
// needs in go.mod and go.sum. Never compiled.
package tools

import (
	_ "github.com/coredns/coredns"
)

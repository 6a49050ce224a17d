//go:build tools

// Package tools names the commands build-etcd-gomod builds, so that go mod tidy keeps what they
// need in go.mod and go.sum. Never compiled.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)

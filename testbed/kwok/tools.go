//go:build tools

// Package tools keeps kwok's commands in go.mod so that `go mod tidy` pins
// their dependencies; the Makefile builds them with `go build`.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)

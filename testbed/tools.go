//go:build tools

// Package tools keeps the control-plane commands in go.mod so that `go mod tidy`
// pins their dependencies; the Makefile builds them with `go build`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)

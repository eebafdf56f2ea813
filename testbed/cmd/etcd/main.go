// Command etcd is etcd's own server entry point, built here so that the test bed
// pins its version in go.mod beside the Kubernetes control plane it serves.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

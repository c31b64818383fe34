//go:build tools

// Package tools pins the command cluster.sh builds (go.mod keeps its dependencies).
package tools

import _ "go.etcd.io/etcd/server/v3"

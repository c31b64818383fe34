//go:build tools

// Package tools pins the commands cluster.sh builds (go.mod keeps their dependencies).
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
	_ "github.com/kedacore/keda/v2/cmd/webhooks"
)

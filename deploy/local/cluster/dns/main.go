// Command coredns is the cluster's DNS (deploy/local/cluster/dns.sh): CoreDNS from its released
// module with only the plugins a one-node cluster uses, in the order CoreDNS's own plugin.cfg
// gives them. Service and pod names come from the API server (kubernetes), the rest is
// forwarded to the host's resolvers.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "loadbalance", "cache", "kubernetes", "forward"}
}

func main() {
	coremain.Run()
}

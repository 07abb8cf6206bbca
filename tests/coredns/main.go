// CoreDNS with the plugins a cluster's DNS uses (those of the Corefile kubeadm
// writes, less the upstream forwarder and the metrics endpoint: the harness
// keeps every packet on the machine), instead of every plugin upstream's main
// links in (cloud DNS providers among them), which would only lengthen the
// build. The directive order stays upstream's (core/dnsserver.Directives);
// this file only chooses which plugins are registered, as CoreDNS's own main
// does with core/plugin.
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"

	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}

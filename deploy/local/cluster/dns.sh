# shellcheck shell=bash
# cluster.sh's DNS (sourced, not run): CoreDNS (cluster/dns, built from its released module)
# on the node's address, port 53, serving cluster.local from the API server and forwarding the
# rest to the host's resolvers. The kubelet gives it to every pod (clusterDNS), so the chart's
# defaults that name Services (sluice-chainsim, <release>-lag.<namespace>.svc, kafka, redis)
# resolve as in a production cluster. KEDA runs on the host, not in a pod: it is started in a
# mount namespace of its own whose /etc/resolv.conf names this server (DNS_RESOLVING), so it
# reaches sluice-lag's scaler by the Service name the chart renders, as KEDA in a cluster does.

DNS_HEALTH_PORT=$((PORT + 16)) DNS_READY_PORT=$((PORT + 17))
CLUSTER_DOMAIN=cluster.local

dns_up() { # node ip
  local ip=$1
  mkdir -p "$DIR/dns"
  cat >"$DIR/dns/Corefile" <<EOF
.:53 {
    bind $ip
    ready 127.0.0.1:$DNS_READY_PORT
    health 127.0.0.1:$DNS_HEALTH_PORT
    errors
    loadbalance
    cache 5
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $KUBECONFIG_FILE
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    # Never ask the host's resolvers for a Service's short form (<svc>.<ns>.svc.): one that
    # answers every name (a proxy's, as here) would send a client to another host for good.
    forward . /etc/resolv.conf {
        except svc
    }
}
EOF
  start coredns -conf "$DIR/dns/Corefile"
  wait_until "CoreDNS ready on $ip:53" 30 coredns dns_ready
}

dns_ready() {
  "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "http://127.0.0.1:$DNS_READY_PORT/ready"
}

# The resolv.conf of the processes on the host that must resolve Service names (KEDA).
dns_resolv_conf() { # node ip
  printf 'nameserver %s\nsearch %s\noptions ndots:5\n' "$1" "$CLUSTER_DOMAIN" >"$DIR/dns/resolv.conf"
}

# The command prefix that runs a process in a mount namespace of its own in which
# /etc/resolv.conf is the cluster's (nothing changes outside it); the exec keeps the PID, so
# start/stop track the process as usual. run.sh's start puts KEDA's three behind it.
# shellcheck disable=SC2016 # $1 and $@ belong to the inner shell
DNS_RESOLVING=(unshare --mount --propagation private sh -c 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"' sh "$DIR/dns/resolv.conf")

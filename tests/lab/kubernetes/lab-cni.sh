#!/bin/sh
# LAB TEST DATA — the lab's pod network, installed by KubeXM as a `system.postInstall` script
# (cluster.yaml `network.plugin: none`), since no flannel/calico/cilium image exists offline here.
#
# On every master and worker (others exit 0): waits until the API has given this node a
# `spec.podCIDR`, writes a CNI configuration for Debian's `bridge` + `host-local` plugins over that
# range (`/etc/cni/net.d/10-kubexm-lab.conflist`; the kubelet picks it up and the node turns Ready),
# and routes every other node's pod range through that node's InternalIP. The routes are also
# written to `/etc/kubexm-lab/pod-routes` and re-applied at boot by `kubexm-lab-pod-routes.service`,
# so a node stopped and started again keeps reaching the others' pods.
#
# It talks to the API with the node's own kubelet credentials (`/etc/kubernetes/kubelet.conf`,
# embedded or file references; the Node authorizer lets a kubelet read every Node) and needs only
# sh, curl, sed, grep and ip — no kubectl or jq on workers. KubeXM gives it KUBEXM_NODE and
# KUBEXM_ROLES. Running it again is harmless: every file and route is replaced, not appended.
set -eu

node=${KUBEXM_NODE:?KUBEXM_NODE is set by kubexm-install}
case ",${KUBEXM_ROLES:-}," in
  *,master,* | *,worker,*) ;;
  *) echo "$node runs no kubelet: nothing to do"; exit 0 ;;
esac

conf=/etc/kubernetes/kubelet.conf
[ -s "$conf" ] || { echo "no $conf: is the kubelet set up on $node?" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
value() { sed -n "s/^ *$1: *//p" "$conf" | head -n 1 | tr -d '"'; }
server=$(value server)
[ -n "$server" ] || { echo "$conf names no server" >&2; exit 2; }
# The CA, client certificate and key: embedded (`-data`, base64) or file paths.
creds() {
  for item in certificate-authority:ca client-certificate:cert client-key:key; do
    k=${item%%:*} f=$tmp/${item#*:}
    d=$(value "$k-data")
    if [ -n "$d" ]; then printf '%s' "$d" | base64 -d >"$f"; else cp "$(value "$k")" "$f"; fi
  done
}
creds
# (A user agent of its own: the API server pretty-prints JSON for curl's.)
api() { curl -fsS --max-time 10 -A kubexm-lab-cni --cacert "$tmp/ca" --cert "$tmp/cert" --key "$tmp/key" "$server$1"; }
# From Kubernetes v1.37 (seen with v1.37.2) the Node authorizer lets a kubelet read only its own
# Node ("node 'node2' cannot read 'node1', only its own Node object"): on a master, the node's
# admin.conf instead (a worker of such a version has no way here).
if ! api /api/v1/nodes >/dev/null 2>&1 && [ -s /etc/kubernetes/admin.conf ]; then
  conf=/etc/kubernetes/admin.conf
  server=$(value server)
  creds
fi

# Every node as `NAME CIDR INTERNAL-IP` lines. A list item starts with {"metadata":{"name":"...
nodes() {
  api /api/v1/nodes | sed 's/{"metadata":{"name":"/\n@@/g' | while IFS= read -r item; do
    case $item in @@*) ;; *) continue ;; esac
    name=${item#@@}
    name=${name%%\"*}
    cidr=$(printf '%s' "$item" | grep -o '"podCIDR":"[^"]*"' | head -n 1 | cut -d'"' -f4)
    ip=$(printf '%s' "$item" | grep -o '"type":"InternalIP","address":"[^"]*"' | head -n 1 | cut -d'"' -f8)
    echo "$name ${cidr:--} ${ip:--}"
  done
}

# The controller-manager gives each node its range shortly after it registers (every node has
# registered when post-install scripts run): wait up to 3 min until this node and every other
# has a range and an InternalIP.
i=0
while :; do
  nodes >"$tmp/nodes" 2>"$tmp/err" || true
  mine=$(awk -v n="$node" '$1 == n && $2 != "-" { print $2 }' "$tmp/nodes")
  if [ -n "$mine" ] && ! grep -q ' -' "$tmp/nodes"; then break; fi
  i=$((i + 1))
  if [ $i -ge 90 ]; then
    echo "not every node has a spec.podCIDR and an InternalIP after 180 s (is the controller-manager allocating node CIDRs?):" >&2
    cat "$tmp/nodes" "$tmp/err" >&2
    exit 3
  fi
  sleep 2
done
echo "$node: pod range $mine"

mkdir -p /etc/cni/net.d
cat >"$tmp/conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kubexm-lab",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$mine"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
install -m 0644 "$tmp/conflist" /etc/cni/net.d/10-kubexm-lab.conflist

# Routes to the other nodes' pod ranges.
mkdir -p /etc/kubexm-lab
awk -v n="$node" '$1 != n && $2 != "-" && $3 != "-" { print $2, $3 }' "$tmp/nodes" >"$tmp/routes"
while read -r cidr via; do
  ip route replace "$cidr" via "$via"
  echo "$node: route $cidr via $via"
done <"$tmp/routes"
install -m 0644 "$tmp/routes" /etc/kubexm-lab/pod-routes
cat >/etc/systemd/system/kubexm-lab-pod-routes.service <<'EOF'
[Unit]
Description=KubeXM lab: routes to the other nodes' pod ranges (tests/lab/kubernetes/lab-cni.sh)
After=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'while read -r c v; do ip route replace "$c" via "$v"; done </etc/kubexm-lab/pod-routes'
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
EOF
systemctl daemon-reload
systemctl enable -q kubexm-lab-pod-routes.service

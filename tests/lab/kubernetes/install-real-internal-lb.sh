# shellcheck shell=bash
# Sourced by `install-real KIND internal` (REAL_LB=internal), after the checks through the endpoint (issue 13
# item 6: with the internal load balancer, HA is HA). node1..node3 are masters (+ etcd, + worker),
# node4 a worker only, running the local API proxy: a static pod of the REAL haproxy image
# (build-images: Debian's haproxy package in the upstream image's layout).

step "node names from cluster.yaml (issue 19): node4, a host named site-host-4 before the install"
[ "$(sshx node4 hostname)" = node4 ] && [ "$(sshx node4 cat /etc/hostname)" = node4 ] || die "node4's hostname is not node4 after the install"
kc get node node4 -o name >/dev/null || die "no Node named node4"
[ -z "$(kc get nodes -o name | grep site-host)" ] || die "a Node is named after the host's former name"
if [ "$KIND" = kubexm ]; then
  # kube-proxy is a unit here: its configuration names the node, and it found its Node object.
  sshx node4 "grep -q '^hostnameOverride: *\"\\?node4\"\\?\$' /etc/kubernetes/kube-proxy.yaml" || die "node4's kube-proxy does not name its node node4"
  ! sshx node4 "journalctl -u kube-proxy --no-pager | grep -q site-host-4" || die "node4's kube-proxy looked for a node named after the host's former name"
else
  kp=$(kc -n kube-system get pods -l k8s-app=kube-proxy --field-selector spec.nodeName=node4 -o 'jsonpath={.items[0].metadata.name}') && [ -n "$kp" ] ||
    die "no kube-proxy pod on node4"
fi
echo "   node4 (site-host-4 before): hostname node4, its Node node4, no Node after the former name; delete gives site-host-4 back (the state compared after delete)"

step "internal load balancer: node4 (a worker only) reaches the API through its local haproxy"
# The proxy is a static pod on node4 only (not on the masters: they use their own API server),
# running the image the nodes pulled from the private registry, through the image's entrypoint.
# (Its mirror pod appears at the kubelet's next sync of it once the API answers, ~1 min: the
# kubelet started it before it could reach the API, which it reaches through it.)
lb_pods_listed() {
  lb_pods=$(kc -n kube-system get pods -l app.kubernetes.io/name=kube-lb \
    -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} {.spec.containers[0].image}{"\n"}{end}' 2>/dev/null) &&
    [ -n "$lb_pods" ] && ! grep -q ' Pending ' <<<"$lb_pods"
}
wait_until 180 "the local proxy's (mirror) pod listed by the API, its status reported" lb_pods_listed
echo "$lb_pods" | sed 's/^/   /'
[ "$(awk '{print $2}' <<<"$lb_pods" | tr '\n' ' ')" = "node4 " ] || die "the local proxy does not run on node4 alone: [$lb_pods]"
read -r lb_pod _ lb_phase lb_image <<<"$lb_pods"
[ "$lb_phase" = Running ] || die "$lb_pod is $lb_phase, not Running"
[[ $lb_image == "$LAB_IP_node1:5000/"*"haproxy:3.2.19-alpine" ]] || die "$lb_pod runs $lb_image, not the haproxy image of the private registry"
sshx node4 "ctr -n k8s.io images ls -q | grep -qxF '$lb_image'" || die "node4 did not pull $lb_image"
# (the rootfs's own haproxy package may run a haproxy of its own on the host: all are listed)
args=$(sshx node4 'for p in $(pgrep -x haproxy); do tr "\0" " " </proc/$p/cmdline | sed "s/ $//"; echo; done')
grep -qx "haproxy -W -db -f /usr/local/etc/haproxy/haproxy.cfg" <<<"$args" || die "no haproxy on node4 runs through the image's entrypoint: [$args]"
[ "$(sshx node4 'curl -fsS -o /dev/null -w "%{http_code}" http://127.0.0.1:8081/healthz')" = 200 ] || die "node4: the proxy's /healthz does not answer"
sshx node4 "curl -fsSk https://127.0.0.1:6443/readyz" | grep -qx ok || die "node4: https://127.0.0.1:6443/readyz (through the proxy) is not ok"
echo "   $lb_pod: $lb_image (from the private registry), haproxy -W -db -f /usr/local/etc/haproxy/haproxy.cfg, /healthz 200, /readyz ok through it"
# Their kubeconfigs (as each process sees its files: the kubeadm path's kube-proxy is a pod, whose
# root is /proc/PID/root): the server is 127.0.0.1:6443.
kubeconfigs=$(sshx node4 'for c in kubelet kube-proxy; do
  pid=$(pgrep -xo $c) || { echo "$c not running"; continue; }
  r=/proc/$pid/root
  k=$(tr "\0" "\n" </proc/$pid/cmdline | awk "/^--kubeconfig=/ {sub(/^--kubeconfig=/, \"\"); print} p {print; p=0} /^--kubeconfig$/ {p=1}")
  if [ -z "$k" ]; then
    cfg=$(tr "\0" "\n" </proc/$pid/cmdline | sed -n "s/^--config=//p")
    k=$(sed -n "s/^ *kubeconfig: *//p" "$r$cfg" | tr -d "\"'\''")
  fi
  echo "$c $k $(sed -n "s/^ *server: *//p" "$r$k" | tr -d "\"'\''" | sort -u | tr "\n" " ")"
done')
sed 's/^/   kubeconfig: /' <<<"$kubeconfigs"
for c in kubelet kube-proxy; do
  grep -q "^$c [^ ]* https://127.0.0.1:6443 $" <<<"$kubeconfigs" || die "node4: $c's kubeconfig does not name https://127.0.0.1:6443 (alone)"
done
# Their connections: every one to an API server port goes to 127.0.0.1:6443 (haproxy's are to
# the masters), at least one each.
conns=$(sshx node4 "ss -Htnp state established '( dport = :6443 )'")
for c in kubelet kube-proxy; do
  grep -q "\"$c\"" <<<"$conns" || { echo "$conns" >&2; die "node4: $c has no connection to port 6443"; }
  grep "\"$c\"" <<<"$conns" | awk '{print $4}' | grep -vqx '127.0.0.1:6443' &&
    { echo "$conns" >&2; die "node4: $c talks to an API server directly, not through 127.0.0.1:6443"; }
done
masters_seen=$(grep '"haproxy"' <<<"$conns" | awk '{print $4}' | sort -u | tr '\n' ' ')
grep -qE "($LAB_IP_node1|$LAB_IP_node2|$LAB_IP_node3):6443" <<<"$masters_seen" || die "node4: haproxy has no connection to a master ($masters_seen)"
echo "   node4: kubelet and kube-proxy connected to 127.0.0.1:6443 only; haproxy to $masters_seen"

rerun_unchanged

step "internal load balancer: node1 (the first master, the registry) stopped, the cluster keeps working"
stopped_at=$(date -u +%s)
"$LAB" stop-node "$NAME" node1 >/dev/null
t=$SECONDS
# kubectl through master2 from now on
KC_EP=(--server "https://$LAB_IP_node2:$ep_port" --tls-server-name "$ep_host")
wait_until 90 "/readyz through node2's API server with node1 stopped" api_up
# Sampled every 2 s: node1 goes NotReady once the node controller's grace period has passed with
# no word from its kubelet (v1.20: 40 s); node2..node4 stay Ready all along, and after node1 is
# NotReady every one of them renews its Lease (its kubelet reaches the API; node4's through its
# proxy). Bounded: 180 s for node1, then 30 s more of samples.
ready_of() { kc get nodes -o 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}' 2>/dev/null; }
notready_at="" samples=0 deadline=$((SECONDS + 180))
while :; do
  r=$(ready_of) || r=""
  if [ -n "$r" ]; then
    samples=$((samples + 1))
    for n in node2 node3 node4; do
      grep -q "\b$n=True\b" <<<"$r" || die "$n is not Ready with node1 stopped ($r, $((SECONDS - t)) s after the stop)"
    done
    if [ -z "$notready_at" ] && ! grep -q "\bnode1=True\b" <<<"$r"; then notready_at=$(date -u +%s); nr_s=$((SECONDS - t)); fi
  fi
  [ -z "$notready_at" ] || [ $(($(date -u +%s) - notready_at)) -lt 30 ] || break
  [ $SECONDS -lt $deadline ] || die "node1 not NotReady 180 s after it stopped (the node controller did not notice)"
  sleep 2
done
echo "   $(ready_of)"
echo "   node1 NotReady $nr_s s after the stop; node2, node3 and node4 Ready in all $samples samples, up to 30 s after that"
lease_renewed_after() { # NODE EPOCH: the node's Lease was renewed after EPOCH
  local r
  r=$(kc -n kube-node-lease get lease "$1" -o 'jsonpath={.spec.renewTime}' 2>/dev/null) || return 1
  [ -n "$r" ] && [ "$(date -u -d "$r" +%s)" -gt "$2" ]
}
for n in node2 node3 node4; do
  wait_until 60 "$n's Lease renewed after node1 went NotReady" lease_renewed_after $n "$notready_at"
done
echo "   node2, node3, node4 renewed their Leases after node1 went NotReady"
# A new pod: scheduled (by the scheduler, now on node2 or node3) to node4 and started there,
# from the image node4 already has (the registry on node1 is down).
probe=ilb-probe-$$
kc -n lab run "$probe" --image="$WEB_IMAGE" --restart=Never --labels=app=ilb-probe \
  --overrides='{"apiVersion":"v1","spec":{"nodeSelector":{"kubernetes.io/hostname":"node4"}}}' >/dev/null ||
  die "kubectl run $probe through node2 failed"
kc -n lab wait --for=condition=Ready "pod/$probe" --timeout=120s >/dev/null ||
  { kc -n lab describe pod "$probe" >&2 || true; die "$probe did not start on node4 with node1 stopped"; }
[ "$(kc -n lab get pod "$probe" -o 'jsonpath={.spec.nodeName}')" = node4 ] || die "$probe is not on node4"
pip=$(kc -n lab get pod "$probe" -o 'jsonpath={.status.podIP}')
[ "$(sshx node4 "curl -fsS --max-time 5 http://$pip/")" = "$probe" ] || die "$probe ($pip) does not answer on node4"
echo "   pod $probe scheduled to node4 and started there with node1 stopped; it answers at $pip"
# The Service from node4 (its kube-proxy, through the local proxy): answered five times in a row
# by the pods of the nodes that run.
svc=$(kc -n lab get svc lab-web -o 'jsonpath={.spec.clusterIP}')
live=$(kc -n lab get pods -l app=lab-web -o 'jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' | awk '$2 != "node1" {print $1}')
ok=0 deadline=$((SECONDS + 90))
while [ $ok -lt 5 ]; do
  got=$(sshx node4 "curl -fsS --max-time 3 http://$svc/" 2>/dev/null || true)
  if [ -n "$got" ] && grep -qx "$got" <<<"$live"; then ok=$((ok + 1)); else ok=0 && sleep 1; fi
  [ $SECONDS -lt $deadline ] || die "Service lab-web ($svc) not answering from node4 five times in a row with node1 stopped"
done
echo "   Service lab-web ($svc) answers from node4 (5 in a row, by the pods of node2..node4)"
# The web server ignores SIGTERM (PID 1 without a handler), so the default 30 s grace period would
# be spent in full, and under a loaded machine the kubelet's final report came after a 60 s wait:
# the probe is stopped at once, and the wait is bounded by 180 s with the pod described on failure.
kc -n lab delete pod "$probe" --grace-period=1 --wait=true --timeout=180s >/dev/null ||
  { kc -n lab describe pod "$probe" >&2 || true; die "kubectl delete pod $probe did not finish in 180 s with node1 stopped"; }
failover_s=$((SECONDS - t))
"$LAB" start-node "$NAME" node1 >/dev/null
wait_until 300 "node1's kubelet answering after its restart" kubelet_back node1
wait_until 300 "$NN Ready nodes after node1's restart" ready_nodes
echo "   node1 back: $NN nodes Ready"
KC_EP=(--server "https://$LAB_IP_node1:$ep_port" --tls-server-name "$ep_host")

if [ "$CNI_CHANGE" = 1 ]; then cni_change; fi
delete_as_before

step ""
echo "== install-real $KIND internal passed in $((SECONDS - T0)) s: bundle $bundle_s s, install $install_s s, re-run $rerun_s s, node1 stopped $failover_s s (NotReady after $nr_s s), delete $delete_s s"
printf '   %s\n' "${TIMES[@]}"
sed 's/^/   /' "$work/components.txt"

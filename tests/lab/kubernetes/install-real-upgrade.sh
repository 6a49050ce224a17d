# shellcheck shell=bash
# Sourced by `install-real KIND` (REAL_UPGRADE=1, the default) after the day-2 steps: `upgrade`
# (issue 17) of the real v1.20.2 cluster to v1.21.0.
#
# v1.21.0 is a STAND-IN: the same v1.20.2 source relinked with KUBE_GIT_VERSION=v1.21.0
# (build-kubernetes-standin), so every binary and image reports v1.21.0 (--version, /version,
# the Node's kubeletVersion, kubeadm's own version) while running v1.20.2's code. No second real
# Kubernetes version can be built here. What it proves is KubeXM's rollout: the path, the checks,
# the order, the drains, the binaries and images of the new bundle on every node, the restarts,
# the versions reported afterwards, the state kept for --resume.
#
# Checks:
#   (a) refusals before anything connects: a cluster.yaml that changes more than the version
#       (exit 2, nothing recorded); without --yes the path and the plan are printed, nothing changes;
#   (b) a deprecated API requested before (extensions/v1beta1 ingresses, removed in 1.22) is named
#       as a warning (the target is 1.21);
#   (c) the run, sampled every second: node2 is stopped while its own upgrade task runs; the run
#       fails naming node2, node1 reports v1.21.0 and node3 still v1.20.2, the API answers
#       through the endpoint; node2 started again, `--resume` finishes without redoing node1;
#   (d) afterwards: every kubelet and every API server reports v1.21.0, (kubeadm) kube-proxy's
#       DaemonSet runs the v1.21.0 image and kubeadm-config says v1.21.0, (kubexm) each
#       component's process runs the new binary; the masters were upgraded in order node1,
#       node2, node3, never two nodes cordoned at once, every node uncordoned; the record holds
#       the new bundle and version; checks 1-2 pass; a second upgrade has nothing to do.
# Needs: $work/upgrade.tar.zst (the v1.21.0 bundle, built with the first one).

UP_V=$UPGRADE_K8S
step "upgrade $K8S -> $UP_V (STAND-IN $UP_V: v1.20.2 relinked), a node stopped mid-upgrade, --resume (issue 17)"
[ -s "$work/upgrade.tar.zst" ] || die "no upgrade bundle $work/upgrade.tar.zst"
rec_dir=$work/kubexm/clusters/$(sed -n 's/^  name: *//p' "$work/cluster.yaml" | head -1)
[ -s "$rec_dir/cluster.yaml" ] || rec_dir=$(dirname "$(ls "$work"/kubexm/clusters/*/cluster.yaml | head -1)")
[ -s "$rec_dir/cluster.yaml" ] || die "no recorded cluster.yaml under $work/kubexm/clusters"
# The cluster.yaml the cluster was last applied with (apply changed it above), at the new version.
up_yaml=$work/cluster-upgrade.yaml
sed "s/^    version: $K8S\$/    version: $UP_V/" "$rec_dir/cluster.yaml" >"$up_yaml"
grep -q "^    version: $UP_V\$" "$up_yaml" || die "cannot set the version in $up_yaml"
declare -F kxl >/dev/null || kxl() { "$LAB" exec "$NAME" "$BIN/kubexm-install" --work-dir "$work/kubexm" "$@"; }
[ -f "$work/backup.key" ] || kxl backup keygen --key-file "$work/backup.key" >/dev/null || die "backup keygen failed"
# --no-verify (here and below): see install() in install-real (STAND-IN CoreDNS and NodeLocal DNS:
# the verification upgrade ends with by default cannot pass on this lab).
up() { kx upgrade --bundle "$work/upgrade.tar.zst" -f "$up_yaml" --backup-key "$work/backup.key" --no-verify "$@"; }
kubelet_versions() { kc get nodes -o 'jsonpath={range .items[*]}{.metadata.name}={.status.nodeInfo.kubeletVersion} {end}'; }
apiserver_version() { "$LAB" exec "$NAME" curl -sk --max-time 10 "https://$1:6443/version" | tr -d ' \n' | sed -n 's/.*"gitVersion":"\([^"]*\)".*/\1/p'; }
record_before=$(sha256sum <"$rec_dir/cluster.yaml")

# (a) A cluster.yaml that changes more than the version: refused before connecting.
bad=$work/cluster-upgrade-bad.yaml
sed 's|^    podCidr: .*|    podCidr: 10.234.0.0/18|' "$up_yaml" >"$bad"
grep -q '10.234.0.0/18' "$bad" || sed -i 's|^  network:$|  network:\n    podCidr: 10.234.0.0/18|' "$bad"
! cmp -s "$bad" "$up_yaml" || die "cannot edit podCidr in $bad"
rc=0; kx upgrade --bundle "$work/upgrade.tar.zst" -f "$bad" --no-backup --yes >"$work/up-bad.out" 2>"$work/up-bad.err" || rc=$?
[ $rc = 2 ] && grep -q "more than the version" "$work/up-bad.err" && grep -q "podCidr" "$work/up-bad.err" ||
  { cat "$work/up-bad.out" "$work/up-bad.err" >&2; die "an upgrade that also changes podCidr was not refused with exit 2 (exit $rc)"; }
[ "$(sha256sum <"$rec_dir/cluster.yaml")" = "$record_before" ] || die "the refused upgrade changed the record"
echo "   refused (exit 2) a cluster.yaml that changes podCidr too"

# (b) A deprecated API requested from node1's API server, where the facts come from.
kc --server "https://$LAB_IP_node1:6443" get --raw /apis/extensions/v1beta1/ingresses >/dev/null 2>&1 ||
  die "extensions/v1beta1 ingresses not served by $K8S"
# Without --yes: the path, the checks and the plan; exit 2; nothing changes.
rc=0; up >"$work/up-noyes.out" 2>"$work/up-noyes.err" || rc=$?
[ $rc = 2 ] && grep -q -- "--yes" "$work/up-noyes.err" && grep -q "^upgrade path: $K8S -> $UP_V" "$work/up-noyes.out" &&
  grep -q "^pipeline upgrade-$UP_V" "$work/up-noyes.out" ||
  { cat "$work/up-noyes.out" "$work/up-noyes.err" >&2; die "upgrade without --yes did not refuse with the path and the plan (exit $rc)"; }
grep -q "warning: a client uses the deprecated extensions/v1beta1 ingresses (removed in 1.22)" "$work/up-noyes.out" ||
  { cat "$work/up-noyes.out" >&2; die "the deprecated API in use was not named"; }
[ "$(kubelet_versions)" = "node1=$K8S node2=$K8S node3=$K8S " ] || die "a kubelet changed although the upgrade was refused: $(kubelet_versions)"
echo "   without --yes: path $K8S -> $UP_V, the deprecated extensions/v1beta1 ingresses named, nothing changed"

# (c) The run, sampled every second; node2 stopped while its own upgrade task runs.
usamples=$work/upgrade-samples
: >"$usamples"
# The sampler must outlive a failed call: it inherits `set -e -o pipefail`, so before this
# `set +e` the first call that failed (an API server restarting behind the endpoint, at the
# first node's upgrade) ended it, and the samples stopped there in earlier runs. Each call's exit
# status and error output go to $usamples.log.
(
  set +e +o pipefail
  while :; do
    ts=$(date +%s)
    rc=0
    out=$(timeout -k 5 15 "$LAB" exec "$NAME" "$KUBECTL" --kubeconfig "$admin" "${KC_EP[@]}" --request-timeout=10s get nodes \
      -o 'jsonpath={range .items[*]}{.metadata.name} u={.spec.unschedulable} v={.status.nodeInfo.kubeletVersion}{"\n"}{end}' 2>>"$usamples.log") || rc=$?
    echo "$ts rc=$rc lines=$(printf '%s' "$out" | grep -c .)" >>"$usamples.log"
    [ -z "$out" ] || printf '%s\n' "$out" | sed "s/^/$ts node /" >>"$usamples"
    sleep 1
  done
) </dev/null >>"$usamples.log" 2>&1 &
usampler=$!
pids+=($usampler)
runs_before=$(ls "$work/kubexm/runs" | wc -l)
t=$SECONDS
up --yes >"$work/up1.out" 2>"$work/up1.err" &
upid=$!
stopped=""
for _ in $(seq 4800); do # up to 20 min
  if [ "$(ls "$work/kubexm/runs" | wc -l)" -gt "$runs_before" ]; then
    ev=$(ls -d "$work"/kubexm/runs/* | sort | tail -1)/events.jsonl
    if grep -qE '"event":"TaskStarted","module":"control-plane-node2","task":"(kubeadm-upgrade-node|control-plane)"' "$ev" 2>/dev/null; then
      sleep 2
      "$LAB" stop-node "$NAME" node2 >/dev/null
      stopped=1
      break
    fi
  fi
  kill -0 $upid 2>/dev/null || break
  sleep 0.25
done
[ -n "$stopped" ] || { wait $upid || true; tail -30 "$work/up1.out" "$work/up1.err" >&2; die "the upgrade never reached node2's upgrade task"; }
if wait $upid; then die "the upgrade succeeded although node2 was stopped during its upgrade"; fi
grep -A4 '^error:' "$work/up1.err" | grep -q "node2" || { tail -30 "$work/up1.err" >&2; die "the failed upgrade does not name node2"; }
grep -A4 '^error:' "$work/up1.err" | head -5 | sed 's/^/   /'
wait_until 90 "/readyz through the endpoint with node2 stopped" api_up
v1=$(kc get node node1 -o 'jsonpath={.status.nodeInfo.kubeletVersion}')
v3=$(kc get node node3 -o 'jsonpath={.status.nodeInfo.kubeletVersion}')
[ "$v1" = "$UP_V" ] && [ "$v3" = "$K8S" ] || die "after the failure node1 runs kubelet $v1 (want $UP_V), node3 $v3 (want $K8S, untouched)"
[ "$(apiserver_version "$LAB_IP_node1")" = "$UP_V" ] || die "node1's API server does not report $UP_V after its phase"
echo "   stopped node2 during its upgrade: the run failed naming it; node1 at $UP_V, node3 untouched at $K8S, the API serving"
"$LAB" start-node "$NAME" node2 >/dev/null
wait_until 300 "node2's kubelet answering after its restart" kubelet_back node2
up --yes --resume >"$work/up2.out" 2>"$work/up2.err" || { tail -40 "$work/up2.out" "$work/up2.err" >&2; die "upgrade --resume failed"; }
upgrade_s=$((SECONDS - t))
sleep 2
kill $usampler 2>/dev/null || true
wait $usampler 2>/dev/null || true
grep "^phases of\|^  \[" "$work/up2.out" | sed 's/^/   /'
tail -1 "$work/up2.out" | sed 's/^/   /'
grep -q -- "--resume: no new backup" "$work/up2.out" || die "--resume took a new backup"
grep -q "^backup of cluster .* written to" "$work/up1.out" || die "the first run took no backup before the upgrade"
# Node1's phase is not run again: its tasks are resumed.
grep -qE " ([5-9]|[1-9][0-9]+) resumed" "$work/up2.out" || die "--resume did not skip the tasks the first run completed"

# (d) Every kubelet and API server at the new version; the order; the drains.
[ "$(kubelet_versions)" = "node1=$UP_V node2=$UP_V node3=$UP_V " ] || die "kubelets after the upgrade: $(kubelet_versions)"
for n in $NODES; do
  ipv=LAB_IP_$n
  [ "$(apiserver_version "${!ipv}")" = "$UP_V" ] || die "$n's API server does not report $UP_V"
done
if [ "$KIND" = kubeadm ]; then
  img=$(kc -n kube-system get ds kube-proxy -o 'jsonpath={.spec.template.spec.containers[0].image}')
  [ "${img##*:}" = "$UP_V" ] || die "kube-proxy's DaemonSet runs $img, not the $UP_V image"
  kc -n kube-system rollout status ds/kube-proxy --timeout=300s >/dev/null || die "kube-proxy did not roll out $UP_V"
  kc -n kube-system get cm kubeadm-config -o 'jsonpath={.data.ClusterConfiguration}' | grep -q "^kubernetesVersion: $UP_V\$" ||
    die "kubeadm-config does not say kubernetesVersion $UP_V"
  for n in $NODES; do
    sshx $n "grep -q 'kube-apiserver:$UP_V' /etc/kubernetes/manifests/kube-apiserver.yaml && [ \"\$(cat /etc/kubernetes/kubexm/upgraded-to)\" = $UP_V ]" ||
      die "$n: its kube-apiserver manifest or upgrade marker does not say $UP_V"
  done
else
  for n in $NODES; do
    for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
      sshx $n "pid=\$(systemctl show -p MainPID --value $c); [ \"\$(readlink /proc/\$pid/exe)\" = /usr/local/bin/$c ] && /usr/local/bin/$c --version | grep -q 'Kubernetes $UP_V\$'" ||
        die "$n: $c does not run the $UP_V binary"
    done
  done
fi
# The order: each master's kubelet reached the new version after the one before it, and never
# were two nodes cordoned at once; none is cordoned at the end.
python3 - "$usamples" "$UP_V" <<'PY' || { tail -5 "$usamples" >&2; tail -20 "$usamples.log" >&2; die "the upgrade order or the drains were wrong (see above; $(wc -l <"$usamples") samples)"; }
import sys, collections
first_new, cordoned_at, n = {}, collections.defaultdict(set), 0
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) != 5 or p[1] != "node":
        continue
    n += 1
    ts, name, u, v = int(p[0]), p[2], p[3][2:], p[4][2:]
    if v == sys.argv[2] and name not in first_new:
        first_new[name] = ts
    if u == "true":
        cordoned_at[ts].add(name)
assert n > 0, "the sampler recorded no node"
order = sorted(first_new, key=first_new.get)
print(f"   kubelets reached {sys.argv[2]} in order:", " ".join(order))
assert order == ["node1", "node2", "node3"], order
both = {ts: c for ts, c in cordoned_at.items() if len(c) > 1}
assert not both, f"two nodes cordoned at once: {sorted(both.items())[:3]}"
print("   every node was cordoned alone:", ", ".join(sorted({n for c in cordoned_at.values() for n in c})))
PY
[ -z "$(kc get nodes -o 'jsonpath={.items[*].spec.unschedulable}')" ] || die "a node is still cordoned after the upgrade"
grep -q "^    version: $UP_V\$" "$rec_dir/cluster.yaml" || die "the record's cluster.yaml does not say $UP_V"
kc -n lab rollout status deploy/lab-web --timeout=360s >/dev/null || { kc -n lab get pods -o wide >&2 || true; die "lab-web not back after the upgrade"; }
check_cluster
kx upgrade --bundle "$work/upgrade.tar.zst" -f "$up_yaml" --no-backup --yes --no-verify >"$work/up3.out" 2>"$work/up3.err" ||
  { cat "$work/up3.err" >&2; die "upgrade again failed"; }
grep -q "runs $UP_V already: nothing to upgrade" "$work/up3.out" || { cat "$work/up3.out" >&2; die "a second upgrade did not find nothing to do"; }
echo "   every kubelet and API server at $UP_V, masters in order, one node cordoned at a time, a second run has nothing to do ($upgrade_s s)"

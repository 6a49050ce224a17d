# Shared by the bash lab scripts (sourced): the local mirror and the bundle built from it, a
# three-node lab with the lab cluster, the installer run inside it, and the checks of what an
# install claims (demo, e2e-nginx, guide, selftest, kubernetes/*; the Rust scenarios have theirs
# in tests/labkit). The caller sets HERE (tests/lab), REPO, LAB (tests/lab/lab),
# NAME (the lab) and work (a scratch directory) and defines `die MESSAGE`.

pids=() # background services (HTTP mirror, source registry) stopped by stop_services

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { local i; for i in $(seq 100); do curl -fso /dev/null "$1" && return; sleep 0.1; done; die "$1 did not answer"; }

stop_services() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

# Builds kubexm-build and kubexm-install; sets BIN.
build_tools() {
  (cd "$REPO" && cargo build -q -p kubexm-build -p kubexm-install)
  BIN=${CARGO_TARGET_DIR:-$REPO/target}/debug
}

# The local mirror and the lab's Debian archive served over HTTP, a source registry filled with
# stand-in images, and `kubexm-build bundle` of the lab cluster ($CLUSTER_YAML, default
# tests/lab/cluster.yaml) from them: $work/lab.tar.zst.
build_bundle() {
  local mirror http_port reg_port
  mirror=$("$HERE/mirror/build-mirror")
  http_port=$(free_port)
  (cd "$mirror/files" && exec python3 -m http.server --bind 127.0.0.1 "$http_port") >"$work/http.log" 2>&1 &
  pids+=($!)
  reg_port=$(free_port)
  cat >"$work/registry.yml" <<EOF2
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $work/registry}}
http: {addr: 127.0.0.1:$reg_port}
EOF2
  docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
  pids+=($!)
  # Debian's archive for the OS packages, when the cluster lists osReleases: [debian-12].
  local debmirror deb_port=28081 cluster=${CLUSTER_YAML:-$HERE/cluster.yaml}
  if grep -q '^    osReleases:' "$cluster"; then
    debmirror=$("$HERE/mirror/build-debmirror")
    deb_port=$(free_port)
    (cd "$debmirror" && exec python3 -m http.server --bind 127.0.0.1 "$deb_port") >"$work/http-deb.log" 2>&1 &
    pids+=($!)
    wait_http "http://127.0.0.1:$deb_port/debian/dists/bookworm/InRelease"
  fi
  wait_http "http://127.0.0.1:$http_port/"
  wait_http "http://127.0.0.1:$reg_port/v2/"
  sed -e "s/127.0.0.1:28080/127.0.0.1:$http_port/; s/127.0.0.1:28081/127.0.0.1:$deb_port/; s/127.0.0.1:25000/127.0.0.1:$reg_port/" \
    "$HERE/mirror/zone-lab.yaml" >"$work/zone.yaml"
  local args=(-f "$cluster" --catalog "$HERE/mirror/catalog-lab.yaml" --zone-file "$work/zone.yaml")
  "$BIN/kubexm-build" resolve "${args[@]}" -o json >"$work/resolve.json"
  "$HERE/mirror/fill-registry" "$work/resolve.json" >/dev/null
  KUBEXM_CACHE_DIR=$work/cache "$BIN/kubexm-build" bundle "${args[@]}" -o "$work/lab.tar.zst" >/dev/null 2>&1 ||
    die "kubexm-build bundle failed"
}

# lab_start [10.88.X] [NODES]: a fresh lab NAME of NODES nodes (3 by default; on that subnet,
# else on one no other lab uses), its variables (LAB_IP_node1, LAB_VIP, LAB_SSH_KEY, ...) and
# $work/cluster.yaml for it (the three-node lab cluster).
lab_start() {
  local subnet=${1:-} nodes=${2:-3}
  # Nodes share the host kernel: load the modules Kubernetes needs here (a container cannot).
  modprobe -a br_netfilter overlay ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack 2>/dev/null || true
  "$LAB" down "$NAME" >/dev/null 2>&1 || true
  "$LAB" up --name "$NAME" --nodes "$nodes" ${subnet:+--subnet "$subnet"} >/dev/null
  . <("$LAB" env "$NAME")
  "$LAB" cluster-yaml "$NAME" >"$work/cluster.yaml"
}

sshx() { # node cmd...
  local ipv=LAB_IP_$1; shift
  "$LAB" exec "$NAME" ssh -i "$LAB_SSH_KEY" -o UserKnownHostsFile="$LAB_KNOWN_HOSTS" \
    -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5 "root@${!ipv}" "$@"
}

# with_preflight FILE SETTING: SETTING (e.g. `etcdFsyncCheck: false`) added to FILE's
# spec.system.preflight, in place.
with_preflight() {
  sed -i "s/^    preflight:\$/    preflight:\n      $2/" "$1"
  grep -qxF "      $2" "$1" || die "could not add $2 to $1's preflight"
}

# with_os_releases IN OUT: the cluster.yaml IN listing `osReleases: [debian-12]` (the bundle
# carries the OS packages as a signed repository, the nodes' only package source).
with_os_releases() {
  sed 's/^  system:$/  system:\n    osReleases: [debian-12]/' "$1" >"$2"
  grep -q '^    osReleases: \[debian-12\]$' "$2" || die "could not add osReleases to $1"
}

# node_state NODE: a fingerprint of what an install changes and a delete must put back (files
# KubeXM edits, directories it fills, services it enables), compared before and after. The OS
# packages an install brings from the bundle stay installed after a delete (an air-gapped host may
# have no way to get them back): when the package list was recorded before the install (as the
# e2e's Lab::record_packages does), what belongs to packages that were not there before is left
# out, unless KubeXM wrote it.
PKGS_BEFORE=/var/tmp/kubexm-lab-packages-before
node_state() {
  sshx "$1" 'hostname; cat /etc/hostname
    new=$( [ -e '"$PKGS_BEFORE"' ] && dpkg-query -W -f="\${Package}\n" | grep -vxFf '"$PKGS_BEFORE"' || true)
    owned=$(for p in $new; do dpkg -L "$p" 2>/dev/null; done | sort -u)
    ucf_new() { # a configuration file a new package made in its maintainer scripts (ucf), e.g. chrony.conf
      local p; p=$(ucfq -w "$1" 2>/dev/null | cut -d: -f2) || return 1
      [ -n "$p" ] && printf "%s\n" $new | grep -qxF -- "$p"; }
    script_new() { # what a new package'"'"'s maintainer scripts make, owned by none: python3 (a dependency of fio) makes /var/lib/python
      case "$1" in /var/lib/python) printf "%s\n" $new | grep -qx "python3[.0-9]*\(-minimal\)\?";; *) false;; esac; }
    from_new() { [ -n "$owned" ] && { printf "%s\n" "$owned" | grep -qxF -- "$1" || ucf_new "$1" || script_new "$1"; }; }
    for f in /etc/hosts /etc/resolv.conf /etc/chrony/chrony.conf /etc/haproxy/haproxy.cfg /etc/keepalived/keepalived.conf /etc/fstab; do
      if from_new "$f" && ! head -n 1 "$f" 2>/dev/null | grep -q "^# Written by KubeXM"; then echo "absent or a new package'"'"'s $f"
      elif [ -e "$f" ]; then md5sum "$f"; else echo "absent or a new package'"'"'s $f"; fi; done
    for d in /usr/local/bin /usr/local/sbin /etc/sysctl.d /etc/modules-load.d /opt /var/lib/containerd /var/lib /etc/ssl; do
      echo "$d: $(ls -A "$d" 2>&1 | while read -r e; do from_new "$d/$e" || echo "$e"; done | tr "\n" " ")"; done
    for u in haproxy keepalived; do
      s=$(systemctl is-enabled $u 2>/dev/null) || true
      case "$s" in ""|disabled) echo "$u not enabled";; *) echo "$u $s";; esac; done
    echo "sources.list.d: $(ls -A /etc/apt/sources.list.d 2>&1 | tr "\n" " ")"; if [ -e /etc/apt/sources.list ]; then md5sum /etc/apt/sources.list; else echo "no /etc/apt/sources.list"; fi'
}

# install ARGS...: the lab cluster installed from the lab bundle. --no-verify: an install ends with
# verify-cluster's checks by default, and on this lab's STAND-IN kubelets and kubectl (no pod runs)
# they cannot pass.
install() {
  "$LAB" exec "$NAME" env KUBEXM_LAB_PASSWORD="$LAB_USER_PASSWORD" \
    "$BIN/kubexm-install" --work-dir "$work/kubexm" --bundle "$work/lab.tar.zst" -f "$work/cluster.yaml" \
    --no-verify --known-hosts "$LAB_KNOWN_HOSTS" "$@"
}

status() { # kubexm-install status ARGS...: the installed cluster's record and live facts
  "$LAB" exec "$NAME" env KUBEXM_LAB_PASSWORD="$LAB_USER_PASSWORD" \
    "$BIN/kubexm-install" --work-dir "$work/kubexm" status --known-hosts "$LAB_KNOWN_HOSTS" "$@"
}

delete() {
  "$LAB" exec "$NAME" env KUBEXM_LAB_PASSWORD="$LAB_USER_PASSWORD" \
    "$BIN/kubexm-install" --work-dir "$work/kubexm" delete --bundle "$work/lab.tar.zst" -f "$work/cluster.yaml" \
    --known-hosts "$LAB_KNOWN_HOSTS" "$@"
}

# What the install claims, checked on the nodes (each check dies with what is wrong); prints a
# line per check. Sets VIP_HOLDER to the node holding the VIP.
check_install() {
  local n holders=0
  for n in node1 node2 node3; do
    [ "$(sshx $n hostname)" = "$n" ] || die "$n: hostname"
    sshx $n "grep -q '^# BEGIN KubeXM Managed Block' /etc/hosts && grep -q ' node3\$' /etc/hosts" || die "$n: /etc/hosts block"
    sshx $n "grep -qx 'name=$NAME' /etc/kubexm/cluster" || die "$n: node marker"
    sshx $n "systemctl is-active -q chrony" || die "$n: chrony not active"
    sshx $n "test \$(cat /proc/sys/net/ipv4/ip_forward) = 1" || die "$n: ip_forward"
    echo "   $n: hostname, /etc/hosts block, marker, chrony, ip_forward ok"
  done
  sshx node2 "grep -q 'server $LAB_IP_node1 iburst' /etc/chrony/chrony.conf" || die "node2 does not follow node1's time"
  # etcd: a healthy 3-member cluster over TLS, asked from node1 with the admin certificate.
  sshx node1 "ETCDCTL_API=3 etcdctl --endpoints=https://$LAB_IP_node1:2379,https://$LAB_IP_node2:2379,https://$LAB_IP_node3:2379 \
    --cacert=/etc/ssl/etcd/ssl/ca.pem --cert=/etc/ssl/etcd/ssl/admin-node1.pem --key=/etc/ssl/etcd/ssl/admin-node1-key.pem \
    endpoint health" >"$work/etcd-health" 2>&1 || { cat "$work/etcd-health" >&2; die "etcd is not healthy"; }
  [ "$(grep -c 'is healthy' "$work/etcd-health")" = 3 ] || { cat "$work/etcd-health" >&2; die "not 3 healthy etcd members"; }
  echo "   etcd: 3 members healthy over TLS"
  # The registry on node1 (TLS from the installer's CA) holds every bundle image; skopeo checks one.
  local ca
  ca=$(ls "$work"/kubexm/pki/*/registry/registry-ca.crt)
  mkdir -p "$work/certs.d" && cp "$ca" "$work/certs.d/ca.crt"
  "$LAB" exec "$NAME" skopeo inspect --cert-dir "$work/certs.d" "docker://$LAB_IP_node1:5000/pause:3.10" >/dev/null ||
    die "skopeo cannot read pause:3.10 from the seeded registry over TLS"
  echo "   registry: seeded, pause:3.10 readable over TLS with the installer's CA (skopeo)"
  VIP_HOLDER=
  for n in node1 node2 node3; do
    sshx $n "systemctl is-active -q containerd" || die "$n: containerd not active"
    sshx $n "ctr -n k8s.io images ls -q | grep -qx '$LAB_IP_node1:5000/pause:3.10'" || die "$n: pause image not pulled"
    sshx $n "systemctl is-active -q haproxy && systemctl is-active -q keepalived" || die "$n: haproxy/keepalived not active"
    if sshx $n "ip -o -4 addr show dev eth0 | grep -q ' $LAB_VIP/'"; then holders=$((holders + 1)); VIP_HOLDER=$n; fi
    echo "   $n: containerd active with pause from the private registry; haproxy + keepalived active"
  done
  [ "$holders" = 1 ] || die "$holders nodes hold the VIP $LAB_VIP (want exactly 1)"
  echo "   VIP $LAB_VIP held by exactly one node ($VIP_HOLDER)"
}

# The OS packages came from the bundle's signed repository, on nodes that have no package source
# of their own (prints a line per check; dies with what is wrong). DPKG_LOG_LINES_<node> is the
# length of /var/log/dpkg.log before the install (set by record_dpkg_log).
record_dpkg_log() {
  local n
  for n in node1 node2 node3; do
    printf -v "DPKG_LOG_LINES_$n" '%s' "$(sshx $n 'wc -l </var/log/dpkg.log')"
  done
}
check_os_packages() { # [LB PACKAGE...] (default: haproxy keepalived)
  local n lines installed lb=("$@")
  [ $# -gt 0 ] || lb=(haproxy keepalived)
  for n in node1 node2 node3; do
    sshx $n "grep -qx 'Signed-By: /var/lib/kubexm/repos/kubexm-repo-key.gpg' /etc/apt/sources.list.d/kubexm.sources && ! grep -qi trusted /etc/apt/sources.list.d/kubexm.sources" ||
      die "$n: no signed source for the bundle's repository"
    [ "$(sshx $n 'ls -A /etc/apt/sources.list.d; ls /etc/apt/sources.list 2>/dev/null || true')" = kubexm.sources ] ||
      die "$n: the bundle's source is not the node's only apt source"
    sshx $n "gpgv --keyring /var/lib/kubexm/repos/kubexm-repo-key.gpg /var/lib/kubexm/repos/debian-12/InRelease" >/dev/null 2>&1 ||
      die "$n: gpgv does not accept the repository's InRelease with the bundle's key"
    for p in socat conntrack ipset ipvsadm ebtables chrony "${lb[@]}"; do
      sshx $n "dpkg-query -W -f='\${Status}' $p 2>/dev/null | grep -q 'install ok installed'" || die "$n: $p is not installed"
    done
    lines=DPKG_LOG_LINES_$n
    installed=$(sshx $n "tail -n +$((${!lines} + 1)) /var/log/dpkg.log | awk '\$3 == \"install\" {print \$4}' | cut -d: -f1 | sort -u | tr '\n' ' '")
    grep -qw socat <<<"$installed" || die "$n: socat was not installed by this install (dpkg.log: $installed)"
    # Already there (the rootfs has them): not installed again.
    for p in curl openssl iptables; do
      ! grep -qw "$p" <<<"$installed" || die "$n: $p was present but installed again"
    done
    # apt never read the node's own sources or wrote its own lists.
    sshx $n "! ls /var/lib/apt/lists/ 2>/dev/null | grep -q _Packages" || die "$n: apt fetched lists from the node's own sources"
    echo "   $n: $(wc -w <<<"$installed") OS packages installed from the bundle's signed repository alone (Signed-By its key, gpgv accepts its InRelease); curl/openssl/iptables already there, not reinstalled"
  done
}
# kubexm ARGS...: kubexm-install ARGS (a verb, e.g. `etcd add-member`, and its flags) in the lab
# namespace with the lab's work directory, known_hosts and node3's sudo password.
kubexm() {
  "$LAB" exec "$NAME" env KUBEXM_LAB_PASSWORD="$LAB_USER_PASSWORD" \
    "$BIN/kubexm-install" --work-dir "$work/kubexm" "$@" --known-hosts "$LAB_KNOWN_HOSTS"
}

# with_hosts IN OUT NODE...: the lab cluster.yaml IN with hosts NODE (root, the lab key) added
# after the others (their roles are the caller's edits).
with_hosts() {
  local in=$1 out=$2 n ipv lines=""
  shift 2
  for n in "$@"; do
    ipv=LAB_IP_$n
    lines+="    - {name: $n, address: ${!ipv}, user: root, privateKeyPath: $LAB_SSH_KEY}\n"
  done
  sed "s|^  roleGroups:$|${lines}  roleGroups:|" "$in" >"$out"
}

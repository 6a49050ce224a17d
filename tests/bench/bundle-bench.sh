#!/usr/bin/env bash
# Benchmark of `kubexm-build bundle` against plain tools, on 127.0.0.1 behind an emulated WAN link.
#
# Generates a synthetic corpus (stand-in binaries served by `python3 -m http.server`, OCI images
# with a shared base layer pushed to Debian's `docker-registry`; both servers behind throttle.py,
# per-connection bandwidth + latency, the same for kubexm and the references), then measures:
#   a. cold `kubexm-build bundle` (fresh cache)      vs  b. sequential curl + skopeo copy
#   c. warm rebuild (pack from cache, 0 requests)    vs  tar -cf - TREE | zstd -T0 -3
#   d. max RSS of the cold build and warm pack at SCALE and at 2×SCALE (memory flatness)
#   +  `kubexm-build verify`                         vs  zstd -dc | tar -tf -
# and prints a table. See tests/bench/README.md.
#
# Environment (all optional):
#   SCALE=1          corpus scale (sizes below are multiplied by it; decimals allowed)
#   FILE_MB=32       size of each of the 20 stand-in files at SCALE=1
#   BASE_MB=64       shared base layer of the bench images at SCALE=1
#   LAYER_MB=16      unique layer of each bench image at SCALE=1
#   N_IMAGES=24      bench images (each a two-platform OCI index, amd64 + arm64)
#   MEM_POINT=1      also build at 2×SCALE for the memory-flatness point (0: skip)
#   REPEAT=1         runs of each measurement; the table shows the fastest run (and the highest
#                    max RSS over the runs); use 3+ on a machine that is not idle
#   LINK_MBIT=200    per-connection bandwidth (Mbit/s) of the emulated WAN link in front of the
#                    mirror and the registry, for kubexm and the reference alike (throttle.py);
#                    0 with LINK_MS=0: no proxy, plain loopback
#   LINK_MS=10       one-way latency (ms) of that link (a round trip costs 2×)
#   JOBS=            passed as --jobs to kubexm-build when set
#   KUBEXM_BUILD=    the binary (default: $CARGO_TARGET_DIR or ./target, release)
#   WORK=            work directory (default: a fresh mktemp -d under ${TMPDIR:-/tmp})
#   KEEP=0           1: keep the work directory
#   PERF_DIR=        when set, every kubexm-build bundle run is recorded with `perf record -F 999 -g`
#                    into PERF_DIR/KEY.data (timings then include perf's overhead)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
SCALE=${SCALE:-1}
FILE_MB=${FILE_MB:-32}
BASE_MB=${BASE_MB:-64}
LAYER_MB=${LAYER_MB:-16}
N_IMAGES=${N_IMAGES:-24}
MEM_POINT=${MEM_POINT:-1}
JOBS=${JOBS:-}
LINK_MBIT=${LINK_MBIT:-200}
LINK_MS=${LINK_MS:-10}
REPEAT=${REPEAT:-1}
KEEP=${KEEP:-0}
KX=${KUBEXM_BUILD:-${CARGO_TARGET_DIR:-$REPO/target}/release/kubexm-build}

die() { printf 'bundle-bench: %s\n' "$*" >&2; exit 1; }
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

# --- dependencies ---------------------------------------------------------------------------
need_tools docker-registry:/usr/bin/docker-registry skopeo:skopeo umoci:umoci zstd:zstd \
  python3:python3 time:/usr/bin/time curl:curl
[ -x "$KX" ] || die "no kubexm-build at $KX; build it: cargo build --release -p kubexm-build (or set KUBEXM_BUILD)"

# --- work dir, servers, cleanup -------------------------------------------------------------
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/kubexm-bench.XXXXXX")}
mkdir -p "$WORK"
PIDS=()
cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mb_bytes() { awk -v s="$SCALE" -v f="$2" -v m="$1" 'BEGIN { printf "%d", m * s * f * 1048576 }'; }

# Request lines of an access log (registry: combined format; http.server: same prefix), without
# the sentinel requests sync_log makes. Call sync_log first so every finished request is in.

# start_link NAME HOST:PORT: a throttle.py proxy in front of HOST:PORT; sets LINK_NAME to the
# address clients use (HOST:PORT itself when the link is off).
start_link() {
  local port
  if [ "$LINK_MBIT" = 0 ] && [ "$LINK_MS" = 0 ]; then
    printf -v "LINK_$1" '%s' "$2"
    return
  fi
  port=$(free_port)
  python3 "$REPO/tests/bench/throttle.py" "$port" "$2" "$LINK_MBIT" "$LINK_MS" >"$WORK/link-$1.log" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$port/"
  printf -v "LINK_$1" '%s' "127.0.0.1:$port"
}

start_registry registry
REG=$REG_registry
REG_LOG=$REGLOG_registry
start_link registry "$REG"
REG_VIA=$LINK_registry # what the zone (and so both tools) pull from; pushes go to $REG

start_mirror() { # ROOT LOG → sets MIRROR_PORT
  MIRROR_PORT=$(free_port)
  (cd "$1" && exec python3 -u -m http.server --bind 127.0.0.1 "$MIRROR_PORT") >"$2" 2>&1 &
  PIDS+=($!)
  wait_http "http://127.0.0.1:$MIRROR_PORT/"
}

# --- timing ---------------------------------------------------------------------------------
# timed KEY LOG CMD...: runs CMD (stdout+stderr to LOG) under /usr/bin/time; sets T_KEY (elapsed
# s), R_KEY (max RSS KB), C_KEY (user+sys CPU s).
timed() {
  local key=$1 out=$2; shift 2
  if ! /usr/bin/time -f '%e %M %U %S' -o "$WORK/time.$key" "$@" >"$out" 2>&1; then
    tail -n 30 "$out" >&2
    die "$key failed: $*"
  fi
  local e m u s
  read -r e m u s < <(tail -n 1 "$WORK/time.$key")
  printf -v "T_$key" '%s' "$e"
  printf -v "R_$key" '%s' "$m"
  printf -v "C_$key" '%s' "$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')"
  log "$key: ${e}s, max RSS ${m} KB, CPU $(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')s (load $(cut -d' ' -f1-3 /proc/loadavg))"
}
tcmd() { local key=$1; shift; timed "$key" "$WORK/$key.log" "$@"; } # tcmd KEY CMD...

# best KEY PREP FN ARGS...: REPEAT times, evals PREP then runs FN KEY_N ARGS... (FN is tcmd or
# kx_bundle); sets T_KEY and C_KEY from the fastest run, R_KEY to the highest max RSS.
best() {
  local key=$1 prep=$2 fn=$3 r k t_best="" c_best="" r_max=0
  shift 3
  for r in $(seq "$REPEAT"); do
    k=${key}_$r
    eval "$prep"
    "$fn" "$k" "$@"
    local -n t=T_$k c=C_$k m=R_$k
    if [ -z "$t_best" ] || awk -v a="$t" -v b="$t_best" 'BEGIN { exit !(a < b) }'; then
      t_best=$t c_best=$c
    fi
    [ "$m" -gt "$r_max" ] && r_max=$m
    unset -n t c m
  done
  printf -v "T_$key" '%s' "$t_best"
  printf -v "C_$key" '%s' "$c_best"
  printf -v "R_$key" '%s' "$r_max"
}

# --- corpus ---------------------------------------------------------------------------------
# The same stand-in file list as builder/tests/it/bundle_e2e.rs FILES.
FILES=(
  "kube-apiserver v1.33.11 amd64 dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-apiserver"
  "kube-controller-manager v1.33.11 amd64 dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-controller-manager"
  "kube-scheduler v1.33.11 amd64 dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-scheduler"
  "kubectl v1.33.11 amd64 dl.k8s.io/release/v1.33.11/bin/linux/amd64/kubectl"
  "etcd v3.5.24 amd64 github.com/etcd-io/etcd/releases/download/v3.5.24/etcd-v3.5.24-linux-amd64.tar.gz"
  "calicoctl v3.99.0 amd64 github.com/projectcalico/calico/releases/download/v3.99.0/calicoctl-linux-amd64"
  "calico-chart v3.99.0 amd64 github.com/projectcalico/calico/releases/download/v3.99.0/tigera-operator-v3.99.0.tgz"
  "helm v3.18.4 amd64 get.helm.sh/helm-v3.18.4-linux-amd64.tar.gz"
  "kube-proxy v1.33.11 amd64 dl.k8s.io/release/v1.33.11/bin/linux/amd64/kube-proxy"
  "kube-proxy v1.33.11 arm64 dl.k8s.io/release/v1.33.11/bin/linux/arm64/kube-proxy"
  "kubelet v1.33.11 amd64 dl.k8s.io/release/v1.33.11/bin/linux/amd64/kubelet"
  "kubelet v1.33.11 arm64 dl.k8s.io/release/v1.33.11/bin/linux/arm64/kubelet"
  "containerd 1.7.13 amd64 github.com/containerd/containerd/releases/download/v1.7.13/containerd-1.7.13-linux-amd64.tar.gz"
  "containerd 1.7.13 arm64 github.com/containerd/containerd/releases/download/v1.7.13/containerd-1.7.13-linux-arm64.tar.gz"
  "runc v1.1.12 amd64 github.com/opencontainers/runc/releases/download/v1.1.12/runc.amd64"
  "runc v1.1.12 arm64 github.com/opencontainers/runc/releases/download/v1.1.12/runc.arm64"
  "crictl v1.33.0 amd64 github.com/kubernetes-sigs/cri-tools/releases/download/v1.33.0/crictl-v1.33.0-linux-amd64.tar.gz"
  "crictl v1.33.0 arm64 github.com/kubernetes-sigs/cri-tools/releases/download/v1.33.0/crictl-v1.33.0-linux-arm64.tar.gz"
  "cni-plugins v1.9.1 amd64 github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-amd64-v1.9.1.tgz"
  "cni-plugins v1.9.1 arm64 github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-arm64-v1.9.1.tgz"
)

# For every "OUT_TAG:TAG=ARCH,TAG=ARCH" argument, writes a two-platform OCI index over the
# tagged manifests into the layout and tags it OUT_TAG.
make_indexes() {
  python3 - "$@" <<'PY'
import hashlib, json, os, sys
layout, specs = sys.argv[1], sys.argv[2:]
path = os.path.join(layout, "index.json")
idx = json.load(open(path))
ref = "org.opencontainers.image.ref.name"
by = {m.get("annotations", {}).get(ref): m for m in idx["manifests"]}
for spec in specs:
    out, members = spec.split(":", 1)
    mans = []
    for member in members.split(","):
        tag, arch = member.split("=")
        d = by[tag]
        mans.append({"mediaType": d["mediaType"], "digest": d["digest"], "size": d["size"],
                     "platform": {"architecture": arch, "os": "linux"}})
    doc = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                      "manifests": mans}).encode()
    hexd = hashlib.sha256(doc).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", hexd), "wb") as f:
        f.write(doc)
    desc = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + hexd,
            "size": len(doc), "annotations": {ref: out}}
    idx["manifests"] = [m for m in idx["manifests"] if m.get("annotations", {}).get(ref) != out]
    idx["manifests"].append(desc)
    by[out] = desc
with open(path, "w") as f:
    json.dump(idx, f)
PY
}

# Builds an image with umoci: the tag FROM (or a new empty image) plus one layer holding BYTES
# random bytes at TARGET, as amd64 (tag TAG) and arm64 (tag TAG-arm64, same layers, own
# config), and a two-platform index tagged TAG-index.
umoci_image() { # LAYOUT FROM|- TAG BYTES TARGET
  local layout=$1 from=$2 tag=$3 bytes=$4 target=$5 tmp
  if [ "$from" = - ]; then umoci new --image "$layout:$tag"; else umoci tag --image "$layout:$from" "$tag"; fi
  tmp=$(mktemp "$WORK/layer.XXXXXX")
  head -c "$bytes" /dev/urandom >"$tmp"
  umoci insert --image "$layout:$tag" "$tmp" "$target"
  rm -f "$tmp"
  umoci config --image "$layout:$tag" --os=linux --architecture=amd64
  umoci config --image "$layout:$tag" --tag "$tag-arm64" --os=linux --architecture=arm64
}

TINY_PUSHED=0
# make_corpus NAME SCALE_FACTOR: writes $WORK/NAME/{mirror,catalog.yaml,zone.yaml,cluster.yaml,
# x.yaml}, starts its http.server (sets MIRROR_PORT_NAME, MIRROR_LOG_NAME) and pushes its images
# to the registry under $REG/NAME/img/iN:v1. Sets CORPUS_NAME (bytes generated and served).
make_corpus() {
  local name=$1 f=$2 d=$WORK/$1 line comp ver arch path sum bytes total=0
  log "corpus $name: ${#FILES[@]} files of $(mb_bytes "$FILE_MB" "$f") B, $N_IMAGES images"
  mkdir -p "$d/mirror"
  {
    echo "# Bench pins: sums of the stand-in files served by the bench mirror."
    echo "components:"
  } >"$d/catalog.yaml"
  bytes=$(mb_bytes "$FILE_MB" "$f")
  for line in "${FILES[@]}"; do
    read -r comp ver arch path <<<"$line"
    mkdir -p "$(dirname "$d/mirror/$path")"
    head -c "$bytes" /dev/urandom >"$d/mirror/$path"
    sum=$(sha256sum "$d/mirror/$path" | cut -d' ' -f1)
    printf '  - name: %s\n    versions:\n      "%s": {%s: "%s"}\n' "$comp" "$ver" "$arch" "$sum" >>"$d/catalog.yaml"
    total=$((total + bytes))
  done
  printf 'addonImages:\n  calico:\n    "v3.99.0": ["docker.io/calico/node:v3.99.0"]\n' >>"$d/catalog.yaml"
  start_mirror "$d/mirror" "$d/http.log"
  printf -v "MIRROR_PORT_$name" '%s' "$MIRROR_PORT"
  start_link "mirror_$name" "127.0.0.1:$MIRROR_PORT"
  local link_var=LINK_mirror_$name
  printf -v "MIRROR_LOG_$name" '%s' "$d/http.log"

  cat >"$d/zone.yaml" <<EOF
apiVersion: kubexm.io/v1alpha1
kind: Zone
metadata: {name: bench}
files:
  - {from: 'https://', to: 'http://${!link_var}/'}
images:
  - {from: registry.k8s.io, to: '$REG_VIA/registry.k8s.io', plainHTTP: true}
  - {from: ghcr.io, to: '$REG_VIA/ghcr.io', plainHTTP: true}
  - {from: docker.io/calico, to: '$REG_VIA/calico', plainHTTP: true}
  - {from: registry.bench.local, to: '$REG_VIA/$name', plainHTTP: true}
EOF
  local images="" i
  for i in $(seq "$N_IMAGES"); do images+="registry.bench.local/img/i$i:v1, "; done
  echo "kind: ConfigMap" >"$d/x.yaml"
  cat >"$d/cluster.yaml" <<EOF
apiVersion: kubexm.io/v1alpha1
kind: Cluster
metadata: {name: bench}
spec:
  hosts:
    - {name: m1, address: 10.0.0.11}
    - {name: w1, address: 10.0.0.21, arch: arm64}
  roleGroups:
    etcd: [m1]
    master: [m1]
    worker: [w1]
  kubernetes: {type: kubexm, version: v1.33.11}
  network:
    plugin: calico
    calico: {version: v3.99.0}
  loadBalancer: {mode: internal, internal: {type: kube-vip}, vip: 10.0.0.100, interface: eth0}
  registry:
    type: none
  addons:
    - name: bench
      namespace: default
      type: yaml
      source: {path: x.yaml}
      images: [${images%, }]
EOF

  # Images: one layout, a shared random base layer, one unique random layer per image.
  local layout=$d/oci specs=()
  umoci init --layout "$layout"
  umoci_image "$layout" - base "$(mb_bytes "$BASE_MB" "$f")" /base/base.bin
  for i in $(seq "$N_IMAGES"); do
    umoci_image "$layout" base "i$i" "$(mb_bytes "$LAYER_MB" "$f")" "/data/i$i.bin"
    specs+=("i$i-index:i$i=amd64,i$i-arm64=arm64")
  done
  local tiny=0
  if [ "$TINY_PUSHED" = 0 ]; then
    umoci_image "$layout" - tiny 4096 /tiny.bin
    specs+=("tiny-index:tiny=amd64,tiny-arm64=arm64")
    tiny=1
  fi
  make_indexes "$layout" "${specs[@]}"
  log "corpus $name: pushing images to $REG/$name/img"
  for i in $(seq "$N_IMAGES"); do
    skopeo copy -q --all --dest-tls-verify=false "oci:$layout:i$i-index" "docker://$REG/$name/img/i$i:v1"
  done
  # Every other image the resolver asks for (pause, coredns, node-cache, calico/node, kube-vip):
  # the same tiny two-platform image, pushed once.
  if [ "$tiny" = 1 ]; then
    local src
    while read -r src; do
      case $src in "$REG_VIA/$name/"*) continue ;; esac
      skopeo copy -q --all --dest-tls-verify=false "oci:$layout:tiny-index" "docker://$REG/${src#"$REG_VIA"/}"
    done < <(resolve_list "$name" images)
    TINY_PUSHED=1
  fi
  # Bytes served: the files plus the unique image blobs (layers, configs, manifests).
  local blobs
  blobs=$(du -sb --apparent-size "$layout/blobs" | cut -f1)
  printf -v "CORPUS_$name" '%s' "$((total + blobs))"
  rm -rf "$layout"
}

# resolve_list NAME files|images: URLs / image sources kubexm-build resolves for corpus NAME.
resolve_list() {
  local d=$WORK/$1
  env -u KMZONE "$KX" resolve -f "$d/cluster.yaml" --zone-file "$d/zone.yaml" --catalog "$d/catalog.yaml" -o json |
    python3 -c '
import json, sys
d = json.load(sys.stdin)
if sys.argv[1] == "files":
    for b in d["binaries"]: print(b["url"])
else:
    for i in d["images"]: print(i["source"])
' "$2"
}

# kx_bundle KEY NAME CACHE OUT: one `kubexm-build bundle`, timed.
kx_bundle() {
  local key=$1 d=$WORK/$2 cache=$3 out=$4
  local args=(bundle -f "$d/cluster.yaml" --zone-file "$d/zone.yaml" --catalog "$d/catalog.yaml"
    --cache-dir "$cache" -o "$out" --docker-config /nonexistent/config.json)
  [ -n "$JOBS" ] && args+=(--jobs "$JOBS")
  echo "env -u KMZONE SOURCE_DATE_EPOCH=1700000000 $KX ${args[*]}" >>"$WORK/commands.txt"
  local wrap=()
  if [ -n "${PERF_DIR:-}" ]; then
    mkdir -p "$PERF_DIR"
    wrap=(perf record -q -F 999 -g -o "$PERF_DIR/$key.data" --)
  fi
  timed "$key" "$WORK/$key.log" "${wrap[@]}" env -u KMZONE SOURCE_DATE_EPOCH=1700000000 "$KX" "${args[@]}"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }

# ==========================================================================================
log "work dir $WORK; kubexm-build $KX ($("$KX" --version))"
: >"$WORK/commands.txt"
make_corpus s1 1
S1=$WORK/s1
HTTP1=http://127.0.0.1:$MIRROR_PORT_s1

# a. cold kubexm-build bundle
log "a. cold kubexm-build bundle"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
best cold 'rm -rf "$S1/cache" "$S1/b1.tar.zst"' kx_bundle s1 "$S1/cache" "$S1/b1.tar.zst"
grep '^wrote' "$WORK/cold_1.log" >&2 || true

# b. reference: sequential curl per file, skopeo copy per image
log "b. reference: curl + skopeo copy, sequential"
{
  echo "set -euo pipefail"
  echo "mkdir -p '$S1/ref/files'"
  n=0
  while read -r url; do
    n=$((n + 1))
    echo "curl -fsS -o '$S1/ref/files/$n' '$url'"
  done < <(resolve_list s1 files)
  n=0
  while read -r src; do
    n=$((n + 1))
    echo "skopeo copy -q --all --src-tls-verify=false 'docker://$src' 'oci:$S1/ref/oci:img$n'"
  done < <(resolve_list s1 images)
} >"$WORK/ref-cold.sh"
echo "bash $WORK/ref-cold.sh   # $(grep -c '^curl' "$WORK/ref-cold.sh") curl, $(grep -c '^skopeo' "$WORK/ref-cold.sh") skopeo copy --all" >>"$WORK/commands.txt"
best refcold 'rm -rf "$S1/ref"' tcmd bash "$WORK/ref-cold.sh"

# c. warm rebuild: same cache, new output; no request may reach either server
log "c. warm rebuild (pack from cache)"
sync_log "$HTTP1" "$MIRROR_LOG_s1"
sync_log "http://$REG" "$REG_LOG"
http_before=$(count_reqs "$MIRROR_LOG_s1")
reg_before=$(count_reqs "$REG_LOG")
best warm 'rm -f "$S1/b2.tar.zst"; sync' kx_bundle s1 "$S1/cache" "$S1/b2.tar.zst"
sync_log "$HTTP1" "$MIRROR_LOG_s1"
sync_log "http://$REG" "$REG_LOG"
WARM_HTTP=$(($(count_reqs "$MIRROR_LOG_s1") - http_before))
WARM_REG=$(($(count_reqs "$REG_LOG") - reg_before))
if cmp -s "$S1/b1.tar.zst" "$S1/b2.tar.zst"; then IDENTICAL=yes; else IDENTICAL=NO; fi

# reference pack: tar | zstd over the extracted bundle tree (same files, same blobs)
mkdir -p "$S1/tree"
zstd -q -dc "$S1/b1.tar.zst" | tar -xf - -C "$S1/tree"
echo "tar -cf - -C $S1/tree . | zstd -q -T0 -3 -o $S1/ref.tar.zst" >>"$WORK/commands.txt"
best refpack 'rm -f "$S1/ref.tar.zst"; sync' tcmd bash -c "tar -cf - -C '$S1/tree' . | zstd -q -T0 -3 -o '$S1/ref.tar.zst'"
# extra reference with the durability kubexm gives (it fsyncs the bundle before renaming it)
echo "tar -cf - -C $S1/tree . | zstd -q -T0 -3 -o $S1/ref.tar.zst && sync   # extra" >>"$WORK/commands.txt"
best refpacksync 'rm -f "$S1/ref.tar.zst"; sync' tcmd bash -c "tar -cf - -C '$S1/tree' . | zstd -q -T0 -3 -o '$S1/ref.tar.zst' && sync"

# extra: verify vs zstd -dc | tar -tf -
echo "$KX verify $S1/b1.tar.zst" >>"$WORK/commands.txt"
best verify : tcmd "$KX" verify "$S1/b1.tar.zst"
echo "zstd -dc $S1/b1.tar.zst | tar -tf - >/dev/null" >>"$WORK/commands.txt"
best reflist : tcmd bash -c "zstd -q -dc '$S1/b1.tar.zst' | tar -tf - >/dev/null"

BUNDLE1=$(stat -c %s "$S1/b1.tar.zst")
BYTES_IN1=$(sed -n 's/.*entries, \([0-9]*\) → [0-9]* bytes.*/\1/p' "$WORK/cold_1.log")
REFPACK_SIZE=$(stat -c %s "$S1/ref.tar.zst")
# Free disk for the 2x point (everything is kept with KEEP=1).
[ "$KEEP" = 1 ] || rm -rf "$S1/tree" "$S1/ref" "$S1/ref.tar.zst" "$S1/b2.tar.zst" "$S1/mirror"

# d. memory flatness: the same at 2×SCALE
if [ "$MEM_POINT" = 1 ]; then
  log "d. memory point: corpus at 2×SCALE"
  [ "$KEEP" = 1 ] || rm -rf "$S1/cache" "$S1/b1.tar.zst"
  make_corpus s2 2
  S2=$WORK/s2
  best cold2 'rm -rf "$S2/cache" "$S2/b1.tar.zst"' kx_bundle s2 "$S2/cache" "$S2/b1.tar.zst"
  best warm2 'rm -f "$S2/b2.tar.zst"' kx_bundle s2 "$S2/cache" "$S2/b2.tar.zst"
  BUNDLE2=$(stat -c %s "$S2/b1.tar.zst")
fi

# ==========================================================================================
nproc_=$(nproc)
echo
echo "kubexm-build bundle benchmark — REPEAT=$REPEAT (fastest run shown), load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$LINK_MBIT" = 0 ] && [ "$LINK_MS" = 0 ]; then LINK_TEXT="plain loopback"; else LINK_TEXT="mirror and registry behind throttle.py: ${LINK_MBIT} Mbit/s per connection, ${LINK_MS} ms one-way"; fi
echo "network: $LINK_TEXT"
echo "SCALE=$SCALE ($(mib "$CORPUS_s1") corpus: ${#FILES[@]} files × $(mib "$(mb_bytes "$FILE_MB" 1)"), $N_IMAGES two-platform images = $(mib "$(mb_bytes "$BASE_MB" 1)") shared base + $(mib "$(mb_bytes "$LAYER_MB" 1)") own layer, + 5 tiny images), $nproc_ CPUs, loopback"
printf '%-44s %-30s %-30s %-8s %s\n' "measure" "kubexm" "reference" "ratio" "target"
printf '%-44s %-30s %-30s %-8s %s\n' "a/b cold: bundle vs curl+skopeo (sequential)" \
  "${T_cold}s (cpu ${C_cold}s)" "${T_refcold}s (cpu ${C_refcold}s)" "$(ratio "$T_cold" "$T_refcold")" "<= 0.5"
printf '%-44s %-30s %-30s %-8s %s\n' "c   pack: warm rebuild vs tar|zstd -T0 -3" \
  "${T_warm}s (cpu ${C_warm}s)" "${T_refpack}s (cpu ${C_refpack}s)" "$(ratio "$T_warm" "$T_refpack")" "<= 1.0"
printf '%-44s %-30s %-30s %-8s %s\n' "extra: pack vs tar|zstd -T0 -3 && sync" \
  "${T_warm}s" "${T_refpacksync}s (cpu ${C_refpacksync}s)" "$(ratio "$T_warm" "$T_refpacksync")" "-"
printf '%-44s %-30s %-30s %-8s %s\n' "c   warm rebuild requests (http / registry)" \
  "$WARM_HTTP / $WARM_REG" "-" "-" "0 / 0"
printf '%-44s %-30s %-30s %-8s %s\n' "c   warm bundle byte-identical to cold" "$IDENTICAL" "-" "-" "yes"
if [ "$MEM_POINT" = 1 ]; then
  printf '%-44s %-30s %-30s %-8s %s\n' "d   max RSS cold, SCALE vs 2xSCALE" \
    "$((R_cold / 1024)) MiB / $((R_cold2 / 1024)) MiB" "-" "$(ratio "$R_cold2" "$R_cold")" "flat (~1.0)"
  printf '%-44s %-30s %-30s %-8s %s\n' "d   max RSS warm pack, SCALE vs 2xSCALE" \
    "$((R_warm / 1024)) MiB / $((R_warm2 / 1024)) MiB" "-" "$(ratio "$R_warm2" "$R_warm")" "flat (~1.0)"
  printf '%-44s %-30s %-30s %-8s %s\n' "d   time cold / warm at 2xSCALE" \
    "${T_cold2}s / ${T_warm2}s" "-" "-" "-"
fi
printf '%-44s %-30s %-30s %-8s %s\n' "size: bundle vs corpus (SCALE)" \
  "$(mib "$BUNDLE1") (content $(mib "${BYTES_IN1:-0}"))" "corpus $(mib "$CORPUS_s1"); tar|zstd $(mib "$REFPACK_SIZE")" "$(ratio "$BUNDLE1" "$CORPUS_s1")" "~1.0 (random data)"
[ "$MEM_POINT" = 1 ] && printf '%-44s %-30s %-30s %-8s %s\n' "size: bundle vs corpus (2xSCALE)" \
  "$(mib "$BUNDLE2")" "corpus $(mib "$CORPUS_s2")" "$(ratio "$BUNDLE2" "$CORPUS_s2")" "~1.0"
printf '%-44s %-30s %-30s %-8s %s\n' "extra: verify vs zstd -dc | tar -tf -" \
  "${T_verify}s (cpu ${C_verify}s)" "${T_reflist}s (cpu ${C_reflist}s)" "$(ratio "$T_verify" "$T_reflist")" "-"
printf '%-44s %-30s %-30s\n' "max RSS: cold / warm / verify (SCALE)" \
  "$((R_cold / 1024)) / $((R_warm / 1024)) / $((R_verify / 1024)) MiB" "curl+skopeo $((R_refcold / 1024)) MiB, tar|zstd $((R_refpack / 1024)) MiB"
echo
echo "commands:"
awk '!seen[$0]++ { print "  " $0 }' "$WORK/commands.txt"

#!/usr/bin/env bash
# Benchmark of `kubexm-install seed` and `kubexm-install unpack` against plain tools, on loopback.
#
# Builds a real bundle with `kubexm-build bundle` from a local mirror (stand-in files served by
# `python3 -m http.server`, images pushed with skopeo to a source `docker-registry`, like
# builder/tests/it/bundle_e2e.rs): N_IMAGES single-platform (linux/amd64) umoci images, each a
# shared random base layer plus its own random layer, listed in one addon as
# registry.bench.local/img/iN:v1 (the zone rewrites that to the source registry), plus the five
# small images the resolver adds (pause, coredns, node-cache, calico/node, kube-vip). Then, in one
# run, under /usr/bin/time:
#   1. seed:    kubexm-install seed into a fresh registry  vs  sequential `skopeo copy --all`
#               per image from the unpacked OCI layout into another fresh registry   (≤ 0.5×)
#   2. re-seed: the same seed again                        vs  the first seed           (≤ 5%)
#               and the upload requests (POST/PATCH/PUT …/blobs/uploads/) it makes   (= 0)
#   3. unpack:  kubexm-install unpack into a fresh work dir vs  zstd -dc | tar -x       (≤ 1.2×)
#               and its max RSS
# and prints a table. See tests/bench/README.md.
#
# Environment (all optional):
#   N_IMAGES=20      bench images
#   BASE_MB=30       shared base layer (random, so gzip cannot shrink it)
#   LAYER_MB=10      each image's own layer
#   FILE_MB=4        each of the 14 stand-in files (binaries are not what this bench is about)
#   REPEAT=3         each measurement is repeated (fresh registries / work dirs each time) and
#                    the median is reported; max RSS is the largest seen
#   JOBS=            passed as --jobs to kubexm-install seed when set (default: its own, 8)
#   KUBEXM_BUILD=    kubexm-build binary   (default: $CARGO_TARGET_DIR or ./target, release)
#   KUBEXM_INSTALL=  kubexm-install binary (same default)
#   WORK=            work directory (default: a fresh mktemp -d under ${TMPDIR:-/tmp})
#   KEEP=0           1: keep the work directory
#   PERF_DIR=        when set, the first seed and the unpack are recorded with
#                    `perf record -F 999 -g` into PERF_DIR/{seed,unpack}.data (timings then
#                    include perf's overhead)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
N_IMAGES=${N_IMAGES:-20}
REPEAT=${REPEAT:-3}
BASE_MB=${BASE_MB:-30}
LAYER_MB=${LAYER_MB:-10}
FILE_MB=${FILE_MB:-4}
JOBS=${JOBS:-}
KEEP=${KEEP:-0}
BIN_DIR=${CARGO_TARGET_DIR:-$REPO/target}/release
KX=${KUBEXM_BUILD:-$BIN_DIR/kubexm-build}
KI=${KUBEXM_INSTALL:-$BIN_DIR/kubexm-install}

die() { printf 'seed-bench: %s\n' "$*" >&2; exit 1; }
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

# --- dependencies ---------------------------------------------------------------------------
need_tools docker-registry:/usr/bin/docker-registry skopeo:skopeo umoci:umoci zstd:zstd \
  python3:python3 time:/usr/bin/time curl:curl
for b in "$KX" "$KI"; do
  [ -x "$b" ] || die "no $b; build: cargo build --release -p kubexm-build -p kubexm-install (or set KUBEXM_BUILD / KUBEXM_INSTALL)"
done

# --- work dir, servers, cleanup -------------------------------------------------------------
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/kubexm-seed-bench.XXXXXX")}
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


# start_registry NAME → sets REG_NAME (host:port) and REGLOG_NAME; a fresh docker-registry with
# its access log (combined format) in $WORK/NAME/registry.log.


# Request lines of a registry access log: all, and blob uploads (start, chunk, finish).
count_uploads() {
  { grep -Ec '\] "(POST|PATCH|PUT) /v2/[^ ]*/blobs/uploads/' "$1" || true; }
}

# --- timing ---------------------------------------------------------------------------------
# timed KEY LOG CMD...: runs CMD (stdout+stderr to LOG) under /usr/bin/time -f '%e %M …'; sets
# T_KEY (elapsed s), R_KEY (max RSS KB), C_KEY (user+sys CPU s). Dirty pages are flushed first
# so that no measurement pays for the writes of the one before.
timed() {
  local key=$1 out=$2; shift 2
  sync
  if ! /usr/bin/time -f '%e %M %U %S' -o "$WORK/time.$key" "$@" >"$out" 2>&1; then
    tail -n 30 "$out" >&2
    die "$key failed: $*"
  fi
  local e m u s
  read -r e m u s < <(tail -n 1 "$WORK/time.$key")
  printf -v "T_$key" '%s' "$e"
  printf -v "R_$key" '%s' "$m"
  printf -v "C_$key" '%s' "$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')"
  log "$key: ${e}s, max RSS ${m} KB, CPU $(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')s"
}
perf_wrap() { # KEY → prints nothing; sets PERF=(…) for the command line
  PERF=()
  if [ -n "${PERF_DIR:-}" ]; then
    mkdir -p "$PERF_DIR"
    PERF=(perf record -q -F 999 -g -o "$PERF_DIR/$1.data" --)
  fi
}
# median KEY: the median of T_KEY_1..T_KEY_$REPEAT into T_KEY, the largest R_KEY_i into R_KEY,
# the C_KEY_i of the median run into C_KEY, and all times into ALL_KEY ("a/b/c").
median() {
  local key=$1 i v lines="" all="" rmax=0 t r c
  for i in $(seq "$REPEAT"); do
    t=T_${key}_$i r=R_${key}_$i c=C_${key}_$i
    lines+="${!t} ${!c}"$'\n'
    all+="${all:+/}${!t}"
    ((${!r} > rmax)) && rmax=${!r}
  done
  read -r t c < <(printf '%s' "$lines" | sort -n | sed -n "$(((REPEAT + 1) / 2))p")
  printf -v "T_$key" '%s' "$t"
  printf -v "C_$key" '%s' "$c"
  printf -v "R_$key" '%s' "$rmax"
  printf -v "ALL_$key" '%s' "$all"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'; }
passfail() { # VALUE OP LIMIT
  awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {
    ok = (op == "<=") ? (v <= l) : (v == l); print (v == "n/a" ? "n/a" : (ok ? "PASS" : "FAIL")) }'
}

# --- corpus ---------------------------------------------------------------------------------
# builder/tests/it/bundle_e2e.rs FILES for an all-amd64 cluster (no arm64 worker).
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
  "kubelet v1.33.11 amd64 dl.k8s.io/release/v1.33.11/bin/linux/amd64/kubelet"
  "containerd 1.7.13 amd64 github.com/containerd/containerd/releases/download/v1.7.13/containerd-1.7.13-linux-amd64.tar.gz"
  "runc v1.1.12 amd64 github.com/opencontainers/runc/releases/download/v1.1.12/runc.amd64"
  "crictl v1.33.0 amd64 github.com/kubernetes-sigs/cri-tools/releases/download/v1.33.0/crictl-v1.33.0-linux-amd64.tar.gz"
  "cni-plugins v1.9.1 amd64 github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-amd64-v1.9.1.tgz"
)

log "work dir $WORK; $("$KX" --version); $("$KI" --version)"
: >"$WORK/commands.txt"
start_registry src
start_registry seed
start_registry ref

C=$WORK/corpus
mkdir -p "$C/mirror"
log "corpus: ${#FILES[@]} files × ${FILE_MB} MiB, $N_IMAGES images = ${BASE_MB} MiB shared + ${LAYER_MB} MiB own layer"
{
  echo "# Bench pins: sums of the stand-in files served by the bench mirror."
  echo "components:"
} >"$C/catalog.yaml"
for line in "${FILES[@]}"; do
  read -r comp ver arch path <<<"$line"
  mkdir -p "$(dirname "$C/mirror/$path")"
  head -c $((FILE_MB * 1048576)) /dev/urandom >"$C/mirror/$path"
  sum=$(sha256sum "$C/mirror/$path" | cut -d' ' -f1)
  printf '  - name: %s\n    versions:\n      "%s": {%s: "%s"}\n' "$comp" "$ver" "$arch" "$sum" >>"$C/catalog.yaml"
done
printf 'addonImages:\n  calico:\n    "v3.99.0": ["docker.io/calico/node:v3.99.0"]\n' >>"$C/catalog.yaml"
MIRROR_PORT=$(free_port)
(cd "$C/mirror" && exec python3 -u -m http.server --bind 127.0.0.1 "$MIRROR_PORT") >"$C/http.log" 2>&1 &
PIDS+=($!)
wait_http "http://127.0.0.1:$MIRROR_PORT/"

cat >"$C/zone.yaml" <<EOF
apiVersion: kubexm.io/v1alpha1
kind: Zone
metadata: {name: bench}
files:
  - {from: 'https://', to: 'http://127.0.0.1:$MIRROR_PORT/'}
images:
  - {from: registry.k8s.io, to: '$REG_src/registry.k8s.io', plainHTTP: true}
  - {from: ghcr.io, to: '$REG_src/ghcr.io', plainHTTP: true}
  - {from: docker.io/calico, to: '$REG_src/calico', plainHTTP: true}
  - {from: registry.bench.local, to: '$REG_src/bench-src', plainHTTP: true}
EOF
images=""
for i in $(seq "$N_IMAGES"); do images+="registry.bench.local/img/i$i:v1, "; done
echo "kind: ConfigMap" >"$C/x.yaml"
cat >"$C/cluster.yaml" <<EOF
apiVersion: kubexm.io/v1alpha1
kind: Cluster
metadata: {name: bench}
spec:
  hosts:
    - {name: m1, address: 10.0.0.11}
    - {name: w1, address: 10.0.0.21}
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

# Images with umoci (linux/amd64): FROM (or a new empty image) + one layer of BYTES random bytes.
umoci_image() { # LAYOUT FROM|- TAG BYTES TARGET
  local layout=$1 from=$2 tag=$3 bytes=$4 target=$5 tmp
  if [ "$from" = - ]; then umoci new --image "$layout:$tag"; else umoci tag --image "$layout:$from" "$tag"; fi
  tmp=$(mktemp "$WORK/layer.XXXXXX")
  head -c "$bytes" /dev/urandom >"$tmp"
  umoci insert --image "$layout:$tag" "$tmp" "$target"
  rm -f "$tmp"
  umoci config --image "$layout:$tag" --os=linux --architecture=amd64
}
layout=$C/oci
umoci init --layout "$layout"
umoci_image "$layout" - base $((BASE_MB * 1048576)) /base/base.bin
for i in $(seq "$N_IMAGES"); do
  umoci_image "$layout" base "i$i" $((LAYER_MB * 1048576)) "/data/i$i.bin"
done
log "pushing images to $REG_src"
for i in $(seq "$N_IMAGES"); do
  skopeo copy -q --dest-tls-verify=false "oci:$layout:i$i" "docker://$REG_src/bench-src/img/i$i:v1"
done
resolve_json() {
  env -u KMZONE "$KX" resolve -f "$C/cluster.yaml" --zone-file "$C/zone.yaml" --catalog "$C/catalog.yaml" -o json
}
resolve_json >"$C/resolve.json"
python3 -c '
import json, sys
for i in json.load(open(sys.argv[1]))["images"]: print(i["source"])' "$C/resolve.json" >"$C/sources.txt"
# Every other image the resolver asks for: a small image of its own each. (Not one image pushed
# under five names: kubexm-build fetches single-platform configs concurrently while planning, and
# five images with the same config digest race on one temp file in its cache — see README.md.)
k=0
while read -r src; do
  case $src in "$REG_src/bench-src/"*) continue ;; esac
  k=$((k + 1))
  umoci_image "$layout" - "small$k" 65536 /small.bin
  skopeo copy -q --dest-tls-verify=false "oci:$layout:small$k" "docker://$src"
done <"$C/sources.txt"
rm -rf "$layout"

B=$WORK/bench.tar.zst
log "kubexm-build bundle → $B"
echo "env -u KMZONE $KX bundle -f $C/cluster.yaml --zone-file $C/zone.yaml --catalog $C/catalog.yaml --cache-dir $WORK/cache -o $B --docker-config /nonexistent/config.json" >>"$WORK/commands.txt"
env -u KMZONE SOURCE_DATE_EPOCH=1700000000 "$KX" bundle -f "$C/cluster.yaml" --zone-file "$C/zone.yaml" \
  --catalog "$C/catalog.yaml" --cache-dir "$WORK/cache" -o "$B" --docker-config /nonexistent/config.json \
  >"$WORK/bundle.log" 2>&1 || { tail -n 30 "$WORK/bundle.log" >&2; die "kubexm-build bundle failed"; }
rm -rf "$WORK/cache"
stop_registry src # no longer needed
BUNDLE_SIZE=$(stat -c %s "$B")
N_ALL=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["images"]))' "$C/resolve.json")
log "bundle: $BUNDLE_SIZE bytes, $N_ALL images"

# ==========================================================================================
# 3. unpack + verify vs zstd -dc | tar -x, from a warm page cache, each into a fresh directory
log "3. unpack ($REPEAT×)"
echo "mkdir D && zstd -dc $B | tar -x -C D" >>"$WORK/commands.txt"
echo "mkdir D && zstd -dc $B | tar -x -C D && sync   # extra: with the durability unpack gives" >>"$WORK/commands.txt"
echo "$KI --work-dir FRESH unpack --bundle $B" >>"$WORK/commands.txt"
WD=$WORK/wd
for k in $(seq "$REPEAT"); do
  rm -rf "$WORK/tar" "$WD"; mkdir -p "$WORK/tar"
  timed "reftar_$k" "$WORK/reftar.log" bash -c "zstd -q -dc '$B' | tar -x -C '$WORK/tar'"
  rm -rf "$WORK/tar"; mkdir -p "$WORK/tar"
  timed "reftarsync_$k" "$WORK/reftarsync.log" bash -c "zstd -q -dc '$B' | tar -x -C '$WORK/tar' && sync"
  rm -rf "$WORK/tar"
  perf_wrap unpack
  timed "unpack_$k" "$WORK/unpack.log" "${PERF[@]}" "$KI" --work-dir "$WD" unpack --bundle "$B"
done
median reftar; median reftarsync; median unpack
UNPACKED=$(ls -d "$WD"/bundles/[0-9a-f]*/ | head -n 1)
UNPACKED=${UNPACKED%/}

# 1. seed vs sequential skopeo copy, each into a fresh registry (the seed reuses the unpack in $WD)
seed_args() { # REGISTRY
  SEED_ARGS=(--work-dir "$WD" seed --bundle "$B" --registry "$1" --plain-http --project bench)
  [ -n "$JOBS" ] && SEED_ARGS+=(--jobs "$JOBS")
  return 0
}
seed_args TARGET
echo "$KI ${SEED_ARGS[*]}   # TARGET: a fresh docker-registry" >>"$WORK/commands.txt"
for k in $(seq "$REPEAT"); do
  start_registry "seed$k"
  reg_var=REG_seed$k
  seed_args "${!reg_var}"
  log "1. seed $k/$REPEAT"
  perf_wrap seed
  timed "seed_$k" "$WORK/seed.log" "${PERF[@]}" "$KI" "${SEED_ARGS[@]}"
  grep '^seeded' "$WORK/seed.log" >&2 || true

  if [ "$k" = 1 ]; then
    # Reference script: one skopeo copy per image, sequential, to the same repositories the seed
    # used (taken from its "seeded" log lines, in bundle.json order), in registry TARGET2.
    python3 - "$UNPACKED/bundle.json" "$WORK/seed.log" "${!reg_var}" "$UNPACKED/images" >"$WORK/ref-seed.sh" <<'PY'
import json, sys
manifest, log, seed_reg, layout = sys.argv[1:]
refs = [i["reference"] for i in json.load(open(manifest))["images"]]
targets = []
for line in open(log):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("fields", {}).get("message") == "seeded":
        targets.append(d["fields"]["image"])
assert len(targets) == len(refs), (len(targets), len(refs))
print('set -euo pipefail\nTARGET2=$1')
for ref, t in zip(refs, targets):
    assert t.startswith(seed_reg + "/"), t
    print(f"skopeo copy -q --all --dest-tls-verify=false 'oci:{layout}:{ref}' \"docker://$TARGET2{t[len(seed_reg):]}\"")
PY
    echo "bash $WORK/ref-seed.sh TARGET2   # $(grep -c '^skopeo' "$WORK/ref-seed.sh") × skopeo copy --all --dest-tls-verify=false oci:$UNPACKED/images:REF docker://TARGET2/bench/…, sequential; TARGET2: a fresh docker-registry" >>"$WORK/commands.txt"
  fi

  start_registry "ref$k"
  ref_var=REG_ref$k
  log "1. reference $k/$REPEAT: sequential skopeo copy"
  timed "refseed_$k" "$WORK/refseed.log" bash "$WORK/ref-seed.sh" "${!ref_var}"

  # Both registries must serve the same digests under the same tags.
  python3 - "$WORK/ref-seed.sh" "${!reg_var}" "${!ref_var}" <<'PY' || die "seeded registries differ"
import re, sys, urllib.request
script, a, b = sys.argv[1:]
accept = ", ".join(["application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                    "application/vnd.docker.distribution.manifest.list.v2+json",
                    "application/vnd.docker.distribution.manifest.v2+json"])
bad = n = 0
for line in open(script):
    m = re.search(r'TARGET2/(.+):([^:"]+)"', line)
    if not m:
        continue
    repo, tag = m.groups()
    n += 1
    digests = []
    for reg in (a, b):
        req = urllib.request.Request(f"http://{reg}/v2/{repo}/manifests/{tag}", method="HEAD",
                                     headers={"Accept": accept})
        digests.append(urllib.request.urlopen(req).headers["Docker-Content-Digest"])
    if digests[0] != digests[1]:
        bad += 1
        print(f"{repo}:{tag}: seed {digests[0]} vs skopeo {digests[1]}", file=sys.stderr)
sys.exit(1 if bad or n == 0 else 0)
PY
  stop_registry "ref$k"
  [ "$k" = "$REPEAT" ] || stop_registry "seed$k"
done
median seed; median refseed
reg_var=REG_seed$REPEAT; SEED_REG=${!reg_var}
log_var=REGLOG_seed$REPEAT; SEED_LOG=${!log_var}

# 2. re-seed: the same command again (REPEAT times) into the last seeded registry; count the
#    registry's requests meanwhile
sync_log "http://$SEED_REG" "$SEED_LOG"
SEED_UPLOADS=$(count_uploads "$SEED_LOG")
reqs_before=$(count_reqs "$SEED_LOG")
seed_args "$SEED_REG"
for k in $(seq "$REPEAT"); do
  log "2. re-seed $k/$REPEAT"
  timed "reseed_$k" "$WORK/reseed.log" "$KI" "${SEED_ARGS[@]}"
  grep '^seeded' "$WORK/reseed.log" >&2 || true
done
median reseed
sync_log "http://$SEED_REG" "$SEED_LOG"
RESEED_REQS=$((($(count_reqs "$SEED_LOG") - reqs_before) / REPEAT))
RESEED_UPLOADS=$(($(count_uploads "$SEED_LOG") - SEED_UPLOADS))

# ==========================================================================================
R1=$(ratio "$T_seed" "$T_refseed")
R2=$(ratio "$T_reseed" "$T_seed")
R3=$(ratio "$T_unpack" "$T_reftar")
echo
echo "kubexm-install seed/unpack benchmark — bundle $((BUNDLE_SIZE / 1048576)) MiB: $N_IMAGES linux/amd64 images" \
  "(${BASE_MB} MiB shared base + ${LAYER_MB} MiB own layer) + $((N_ALL - N_IMAGES)) small ones, ${#FILES[@]} files × ${FILE_MB} MiB;" \
  "$(nproc) CPUs, loopback, docker-registry filesystem storage; median of $REPEAT"
fmt='%-42s %-26s %-26s %-8s %-8s %s\n'
printf "$fmt" measure kubexm reference ratio target result
printf "$fmt" "1 seed vs skopeo copy --all (sequential)" "${T_seed}s (cpu ${C_seed}s)" "${T_refseed}s (cpu ${C_refseed}s)" \
  "$R1" "<= 0.5" "$(passfail "$R1" '<=' 0.5)"
printf "$fmt" "2 re-seed vs first seed" "${T_reseed}s (cpu ${C_reseed}s)" "${T_seed}s" \
  "$R2" "<= 0.05" "$(passfail "$R2" '<=' 0.05)"
printf "$fmt" "2 re-seed uploads (all requests/run)" "$RESEED_UPLOADS ($RESEED_REQS)" "first seed: $SEED_UPLOADS uploads" \
  "-" "0" "$(passfail "$RESEED_UPLOADS" '==' 0)"
printf "$fmt" "3 unpack+verify vs zstd -dc | tar -x" "${T_unpack}s (cpu ${C_unpack}s)" "${T_reftar}s (cpu ${C_reftar}s)" \
  "$R3" "<= 1.2" "$(passfail "$R3" '<=' 1.2)"
printf "$fmt" "3 max RSS of unpack" "$((R_unpack / 1024)) MiB" "zstd|tar: $((R_reftar / 1024)) MiB" "-" "-" "-"
printf "$fmt" "extra: unpack vs zstd|tar -x && sync" "${T_unpack}s" "${T_reftarsync}s" "$(ratio "$T_unpack" "$T_reftarsync")" "-" "-"
printf "$fmt" "extra: max RSS seed / re-seed / skopeo" "$((R_seed / 1024)) / $((R_reseed / 1024)) MiB" "$((R_refseed / 1024)) MiB" "-" "-" "-"
echo
echo "all runs (s): seed $ALL_seed; skopeo $ALL_refseed; re-seed $ALL_reseed; unpack $ALL_unpack; zstd|tar $ALL_reftar; zstd|tar+sync $ALL_reftarsync"
echo
echo "commands:"
sed 's/^/  /' "$WORK/commands.txt"

# shellcheck shell=bash
# Sourced by build-kubernetes, build-kubernetes-standin and build-crictl (bash): Debian 12's `kubernetes` source package
# (Kubernetes v1.20.2 with its vendor tree), fetched once into $CACHE/src and checked against
# the pinned sha256 of its orig tarball. The host's apt configuration is not touched: the deb-src
# index goes to a private lists directory. Facts: /work/shared/LAB.md, "Real Kubernetes, built
# from Debian's source package". The caller defines log, die and CACHE.
SRC_PKG=kubernetes
SRC_VER=1.20.5+really1.20.2-1.1+deb12u1
ORIG=kubernetes_1.20.5+really1.20.2.orig.tar.gz
ORIG_SHA256=b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc
K8S_VERSION=v1.20.2
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2 # Debian's v1.0.2 (LAB.md)
DEBIAN_MIRROR=${KUBEXM_LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The toolchain of every build from this source: Debian 12's Go 1.19 (golang-go), named
# explicitly. A machine may put a newer Go first on PATH (/usr/local/go: the Go-module builds of
# gomod/ use that one); v1.20.2's tree does not build reproducibly with it, and the lab catalog
# pins the sums of Go 1.19's binaries.
DEBIAN_GO_BIN=/usr/lib/go-1.19/bin
[ -x "$DEBIAN_GO_BIN/go" ] || die "$DEBIAN_GO_BIN/go missing (apt-get install golang-go: Debian's Go 1.19 builds v1.20.2)"
export PATH="$DEBIAN_GO_BIN:$PATH"

# Prints the path of the verified orig tarball; fetches it (apt-get source) when missing.
fetch_orig() {
  local src=$CACHE/src lists=$CACHE/apt-src-lists
  mkdir -p "$src"
  if [ ! -f "$src/$ORIG" ] || [ "$(sha256sum <"$src/$ORIG" | cut -d' ' -f1)" != "$ORIG_SHA256" ]; then
    rm -f "$src/$ORIG"
    mkdir -p "$lists/partial"
    cat >"$CACHE/apt-src.sources" <<SRC
Types: deb-src
URIs: $DEBIAN_MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    local aptopts=(-o "Dir::Etc::SourceList=$CACHE/apt-src.sources" -o "Dir::Etc::SourceParts=/nonexistent"
      -o "Dir::State::Lists=$lists" -q)
    log "fetching the deb-src index (private lists dir) and $SRC_PKG=$SRC_VER"
    apt-get "${aptopts[@]}" update >/dev/null || die "apt-get update (deb-src) failed"
    # The pinned Debian revision; if the archive has moved on, the current one (same orig
    # tarball: the sha256 below decides).
    (cd "$src" && { apt-get "${aptopts[@]}" source --download-only "$SRC_PKG=$SRC_VER" >/dev/null 2>&1 ||
      apt-get "${aptopts[@]}" source --download-only "$SRC_PKG" >/dev/null; }) ||
      die "apt-get source $SRC_PKG failed"
    [ -f "$src/$ORIG" ] || die "apt-get source $SRC_PKG gave no $ORIG (Debian changed the upstream version?)"
  fi
  local got
  got=$(sha256sum <"$src/$ORIG" | cut -d' ' -f1)
  [ "$got" = "$ORIG_SHA256" ] || die "$ORIG: sha256 $got, expected $ORIG_SHA256"
  echo "$src/$ORIG"
}

# unpack_tree ORIG BUILD: the source tree as build-kubernetes and build-kubernetes-standin build it,
# in BUILD (the fixed build path: Go's cache keys hold the package directories); prints its path.
# Both scripts get it from here, so that the stand-in's relink finds the same compile actions.
unpack_tree() {
  local orig=$1 build=$2 tree
  tar -xzf "$orig" -C "$build"
  tree=$build/kubernetes-${K8S_VERSION#v}
  [ -f "$tree/Makefile" ] || die "no $tree/Makefile in $orig"
  # Go 1.19 vs the vendored reflect2 v1.0.1: json-iterator panics on the first map it decodes
  # (kubeadm init, kubectl). Debian's reflect2 v1.0.2 fixes it (LAB.md).
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -a "$REFLECT2" "$tree/vendor/github.com/modern-go/"
  rm -f "$tree/vendor/github.com/modern-go/reflect2/go.mod"
  # hack/lib/golang.sh points GOCACHE into the tree (_output/local/go/cache), which is deleted at
  # the end: make it keep the caller's, the cache that outlives the tree (the stand-in relinks from
  # it). A shell change only: the binaries are the same.
  # shellcheck disable=SC2016 # golang.sh's own text
  sed -i 's|^  export GOCACHE="${KUBE_GOPATH}/cache"$|  export GOCACHE="${GOCACHE:-${KUBE_GOPATH}/cache}"|' "$tree/hack/lib/golang.sh"
  # shellcheck disable=SC2016
  grep -qF 'export GOCACHE="${GOCACHE:-' "$tree/hack/lib/golang.sh" || die "hack/lib/golang.sh: its GOCACHE line changed"
  mkdir -p "$tree/.go/src/k8s.io"
  ln -sfn ../../.. "$tree/.go/src/k8s.io/kubernetes"
  echo "$tree"
}

# make_components TREE GOCACHE VERSION LOGDIR COMPONENT...: `make WHAT=cmd/COMPONENT` each (GOPATH
# mode, as debian/rules does; module mode wants go.mod updates), dated SOURCE_DATE_EPOCH (the
# caller's), logs in LOGDIR/make-COMPONENT.log. The binaries report VERSION: the version strings are
# link-time -X flags only (hack/lib/version.sh). The orig tarball is a `git archive` export, whose
# version.sh sets gitCommit faecb196, gitTreeState "archive" and gitVersion v1.20.2 itself, over any
# KUBE_GIT_* in the environment; for another VERSION (the stand-in) a KUBE_GIT_VERSION_FILE, which
# version.sh reads instead, gives the same commit and tree state with KUBE_GIT_VERSION=VERSION,
# KUBE_GIT_MAJOR 1 and KUBE_GIT_MINOR from VERSION.
make_components() {
  local tree=$1 gocache=$2 version=$3 logdir=$4 minor commit c t
  shift 4
  minor=${version#v*.}
  minor=${minor%%.*}
  if [ "$version" != "$K8S_VERSION" ]; then
    commit=$(grep -oE "^ +KUBE_GIT_COMMIT='[0-9a-f]{40}'" "$tree/hack/lib/version.sh" | grep -oE '[0-9a-f]{40}') ||
      die "hack/lib/version.sh: no archive commit"
    cat >"$logdir/version-vars" <<VARS
KUBE_GIT_COMMIT='$commit'
KUBE_GIT_TREE_STATE='archive'
KUBE_GIT_VERSION='$version'
KUBE_GIT_MAJOR='1'
KUBE_GIT_MINOR='$minor'
VARS
  fi
  (
    cd "$tree" || exit 1
    export GOPATH=$tree/.go GOCACHE=$gocache GO111MODULE=off CGO_ENABLED=0 GOFLAGS='' SOURCE_DATE_EPOCH
    export KUBE_GIT_VERSION=$version KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=$minor KUBE_GIT_TREE_STATE=clean
    [ "$version" = "$K8S_VERSION" ] || export KUBE_GIT_VERSION_FILE=$logdir/version-vars
    export KUBE_BUILD_PLATFORMS=linux/amd64
    for c in "$@"; do
      t=$SECONDS
      log "make WHAT=cmd/$c ($version)"
      make WHAT="cmd/$c" >"$logdir/make-$c.log" 2>&1 || { tail -30 "$logdir/make-$c.log" >&2; die "make WHAT=cmd/$c failed"; }
      log "make WHAT=cmd/$c ($version): done in $((SECONDS - t)) s"
    done
  )
}

# Sourced by build-kubernetes and build-crictl (bash): Debian 12's `kubernetes` source package
# (Kubernetes v1.20.2 with its vendor tree), fetched once into $CACHE/src and checked against
# the pinned sha256 of its orig tarball. The host's apt configuration is not touched: the deb-src
# index goes to a private lists directory. Facts: /work/shared/LAB.md, "Real Kubernetes, built
# from Debian's source package". The caller defines log, die and CACHE.
SRC_PKG=kubernetes
SRC_VER=1.20.5+really1.20.2-1.1+deb12u1
ORIG=kubernetes_1.20.5+really1.20.2.orig.tar.gz
ORIG_SHA256=b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc
K8S_VERSION=v1.20.2
DEBIAN_MIRROR=${KUBEXM_LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}

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

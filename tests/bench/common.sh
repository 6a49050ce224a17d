# Helpers shared by the KubeXM benchmark scripts; sourced after WORK, PIDS and die() are set.
# shellcheck shell=bash

log() { printf '== %s %s\n' "$(date +%T)" "$*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_http() { # URL: until it answers at all (any status)
  for _ in $(seq 200); do
    curl -s -o /dev/null "$1" && return 0
    sleep 0.05
  done
  die "$1 did not answer"
}

count_reqs() {
  { grep -E '\] "(GET|HEAD|POST|PUT|PATCH|DELETE) /' "$1" || true; } | { grep -vc '/bench-sync/' || true; }
}

SYNC_N=0
sync_log() { # BASE_URL LOG: sends GET /bench-sync/N and waits for its log line
  SYNC_N=$((SYNC_N + 1))
  curl -s -o /dev/null "$1/bench-sync/$SYNC_N" || true
  for _ in $(seq 200); do
    grep -q "GET /bench-sync/$SYNC_N " "$2" && return 0
    sleep 0.05
  done
  die "log $2 did not show the sync request"
}

start_registry() {
  local name=$1 port dir=$WORK/$1
  port=$(free_port)
  mkdir -p "$dir/storage"
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $dir/storage
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$port
  secret: kubexm-bench-not-a-secret
EOF
  docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  PIDS+=($!)
  printf -v "RPID_$name" '%s' "$!"
  wait_http "http://127.0.0.1:$port/v2/"
  printf -v "REG_$name" '%s' "127.0.0.1:$port"
  printf -v "REGLOG_$name" '%s' "$dir/registry.log"
  log "registry $name on 127.0.0.1:$port"
}

stop_registry() { # NAME: stops it and removes its storage
  local pid_var=RPID_$1
  kill "${!pid_var}" 2>/dev/null || true
  wait "${!pid_var}" 2>/dev/null || true
  rm -rf "$WORK/$1/storage"
}

# need_tools PKG:BINARY...: installs (apt-get) the packages whose binary is missing.
need_tools() {
  local pair pkg bin missing=()
  for pair in "$@"; do
    pkg=${pair%%:*} bin=${pair#*:}
    command -v "$bin" >/dev/null 2>&1 || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  local SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  log "installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

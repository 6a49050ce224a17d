#!/usr/bin/env bash
# Benchmark of the SSH runner (kubexm-install's SshRunner, russh) against OpenSSH, on loopback.
#
# Starts an sshd (Debian's openssh-server) on 127.0.0.1 with its own host key and config, then,
# in one run:
#   1. execs:  N_EXECS (200) trivial commands (`true`) one after another through one SshRunner
#              (the `ssh_bench` example)  vs  the same through OpenSSH with a ControlMaster
#              (`ssh -o ControlPath=... HOST true`, master opened first)              (≤ 1.2×)
#   2. upload: a UPLOAD_MB (256) MiB random file with SshRunner::upload (remote sha256 check,
#              stream, sha256 verify, rename)  vs  `scp` and `ssh HOST 'cat > DEST' < FILE`
#              through the same ControlMaster
#   3. task:   the same pipeline task (~40 remote execs, an 8 MiB upload, a config file and a
#              managed block per host) run by the engine on 1 host, then on 3 hosts at once (three
#              more sshds, one per host)                                               (≤ 1.3×)
# and prints a table. See tests/bench/README.md.
#
# Environment (all optional):
#   N_EXECS=200      sequential trivial commands
#   UPLOAD_MB=256    upload size
#   REPEAT=3         each measurement runs REPEAT times; the median is reported
#   HOST_CPU=0.4     cores each emulated host of section 3 may use (its sshd's cgroup quota)
#   SSH_BENCH=       the ssh_bench example binary (default: $CARGO_TARGET_DIR or ./target,
#                    release/examples/ssh_bench)
#   WORK=            work directory (default: a fresh mktemp -d under ${TMPDIR:-/tmp})
#   KEEP=0           1: keep the work directory
#   BENCH_USER=kubexm-bench  login user, created (useradd, shell /bin/sh) when missing: root's
#                    ~/.bashrc is read by bash for every SSH command and can cost more than the
#                    transport being measured (pyenv init: ~100 ms)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
N_EXECS=${N_EXECS:-200}
UPLOAD_MB=${UPLOAD_MB:-256}
REPEAT=${REPEAT:-3}
HOST_CPU=${HOST_CPU-0.4}
KEEP=${KEEP:-0}
BENCH_USER=${BENCH_USER:-kubexm-bench}
BENCH=${SSH_BENCH:-${CARGO_TARGET_DIR:-$REPO/target}/release/examples/ssh_bench}

die() { printf 'ssh-bench: %s\n' "$*" >&2; exit 1; }
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

need_tools openssh-server:/usr/sbin/sshd openssh-client:ssh python3:python3
[ -x "$BENCH" ] || die "no $BENCH; build: cargo build --release -p kubexm-install --example ssh_bench (or set SSH_BENCH)"
[ "$(id -u)" -eq 0 ] || die "run as root (sshd needs it to log in as root on loopback)"

WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/kubexm-ssh-bench.XXXXXX")}
mkdir -p "$WORK"
PIDS=()
CTL=$WORK/ctl-%C
# The engine runs its steps as root through sudo for a non-root login (section 3), as for an
# operator's NOPASSWD sudo user; removed on exit.
SUDOERS=/etc/sudoers.d/kubexm-ssh-bench-$$
# Section 3's hosts each get HOST_CPU cores of their own (cgroup v1 cpu quota), as separate
# machines would: without it the three "hosts" and the control host share this machine's cores
# and the figure measures CPU contention, not the engine.
# (nested in the script's own cpu cgroup, so whatever share the bench was given covers them too).
CPU_CGROUPS=/sys/fs/cgroup/cpu$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ { print $3 }' /proc/self/cgroup)
CPU_CGROUPS=${CPU_CGROUPS%/}/kubexm-ssh-bench-$$
cleanup() {
  local rc=$?
  ssh -o ControlPath="$CTL" -O exit -p "${PORT:-22}" "$BENCH_USER@127.0.0.1" >/dev/null 2>&1 || true
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -f "$SUDOERS"
  for cg in "$CPU_CGROUPS"/*/; do [ -d "$cg" ] && rmdir "$cg" 2>/dev/null; done
  rmdir "$CPU_CGROUPS" 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT

id -u "$BENCH_USER" >/dev/null 2>&1 ||
  useradd -m -d "/var/lib/$BENCH_USER" -s /bin/sh "$BENCH_USER"
# No usable password but not locked (`!`), which sshd refuses under UsePAM no.
usermod -p '*' "$BENCH_USER"
chmod 755 "$WORK" # the login user reads authorized_keys under its own uid

# --- sshd -------------------------------------------------------------------------------------
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$WORK/id_ed25519"
cp "$WORK/id_ed25519.pub" "$WORK/authorized_keys"
chmod 644 "$WORK/authorized_keys"
start_sshd() { # NAME: starts an sshd of its own (its own host key) and prints its port
  local name=$1 port
  port=$(free_port)
  ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_$name"
  cat >"$WORK/sshd_$name.config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $WORK/host_$name
PidFile $WORK/sshd_$name.pid
AuthorizedKeysFile $WORK/authorized_keys
UsePAM no
StrictModes no
PermitRootLogin yes
PasswordAuthentication no
KbdInteractiveAuthentication no
MaxStartups 100
Subsystem sftp internal-sftp
EOF
  /usr/sbin/sshd -D -e -f "$WORK/sshd_$name.config" 2>"$WORK/sshd_$name.log" &
  PIDS+=($!)
  if [ -n "${2:-}" ]; then # CPU quota (cores): the sshd and every session it forks share it
    local cg=$CPU_CGROUPS/$name
    mkdir -p "$cg"
    echo 100000 >"$cg/cpu.cfs_period_us"
    awk -v c="$2" 'BEGIN { printf "%d\n", c * 100000 }' >"$cg/cpu.cfs_quota_us"
    echo "$!" >"$cg/cgroup.procs"
  fi
  for _ in $(seq 200); do
    python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$port),1); sys.exit(0 if s.recv(4)==b'SSH-' else 1)" 2>/dev/null && break
    sleep 0.05
  done
  echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$WORK/host_$name.pub")" >>"$WORK/known_hosts"
  PORT_OUT=$port
}
: >"$WORK/known_hosts"
start_sshd main; PORT=$PORT_OUT
log "sshd on 127.0.0.1:$PORT"

SSH=(ssh -q -p "$PORT" -i "$WORK/id_ed25519" -o UserKnownHostsFile="$WORK/known_hosts"
  -o StrictHostKeyChecking=yes -o BatchMode=yes -o ControlMaster=auto -o ControlPath="$CTL"
  -o ControlPersist=60)
SCP=(scp -q -P "$PORT" -i "$WORK/id_ed25519" -o UserKnownHostsFile="$WORK/known_hosts"
  -o StrictHostKeyChecking=yes -o BatchMode=yes -o ControlMaster=auto -o ControlPath="$CTL"
  -o ControlPersist=60)
KX=("$BENCH" --host 127.0.0.1 --port "$PORT" --user "$BENCH_USER" --key "$WORK/id_ed25519"
  --known-hosts "$WORK/known_hosts")

"${SSH[@]}" "$BENCH_USER@127.0.0.1" true # opens the master
"${SSH[@]}" -O check "$BENCH_USER@127.0.0.1" 2>/dev/null || die "ControlMaster did not start"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.4f", a - b }'; }
field() { sed -n "s/^$1=//p"; }

# --- 1. sequential trivial execs --------------------------------------------------------------
log "$N_EXECS sequential execs x $REPEAT"
kx_exec=() ssh_exec=()
for _ in $(seq "$REPEAT"); do
  kx_exec+=("$("${KX[@]}" --execs "$N_EXECS" | field execs_s)")
  t0=$(now)
  for _ in $(seq "$N_EXECS"); do "${SSH[@]}" "$BENCH_USER@127.0.0.1" true; done
  ssh_exec+=("$(since "$t0")")
done
KX_EXEC=$(printf '%s\n' "${kx_exec[@]}" | median)
SSH_EXEC=$(printf '%s\n' "${ssh_exec[@]}" | median)

# --- 2. upload ---------------------------------------------------------------------------------
log "generating $UPLOAD_MB MiB"
head -c "$((UPLOAD_MB << 20))" /dev/urandom >"$WORK/big.bin"
DEST=$WORK/dest
mkdir -p "$DEST"
chown "$BENCH_USER" "$DEST"
log "upload x $REPEAT"
kx_up=() kx_cat=() scp_up=() cat_up=()
for i in $(seq "$REPEAT"); do
  rm -f "$DEST"/*; sync
  out=$("${KX[@]}" --upload "$WORK/big.bin" --dest "$DEST/kx-$i.bin" --cat-upload)
  kx_up+=("$(field upload_s <<<"$out")")
  kx_cat+=("$(field cat_s <<<"$out")")
  cmp -s "$WORK/big.bin" "$DEST/kx-$i.bin" || die "kubexm upload differs"
  cmp -s "$WORK/big.bin" "$DEST/kx-$i.bin.cat" || die "kubexm exec cat differs"
  rm -f "$DEST"/*; sync
  t0=$(now); "${SCP[@]}" "$WORK/big.bin" "$BENCH_USER@127.0.0.1:$DEST/scp-$i.bin"; scp_up+=("$(since "$t0")")
  rm -f "$DEST"/*; sync
  t0=$(now); "${SSH[@]}" "$BENCH_USER@127.0.0.1" "cat > $DEST/cat-$i.bin" <"$WORK/big.bin"; cat_up+=("$(since "$t0")")
done
rm -f "$DEST"/*
KX_UP=$(printf '%s\n' "${kx_up[@]}" | median)
SCP_UP=$(printf '%s\n' "${scp_up[@]}" | median)
CAT_UP=$(printf '%s\n' "${cat_up[@]}" | median)
KX_CAT=$(printf '%s\n' "${kx_cat[@]}" | median)

# --- 3. the same task on 1 host and on 3 hosts -------------------------------------------------
# Three more sshds, each standing for its own host (own host key, own connection, own CPU quota of
# HOST_CPU cores: a remote host's work does not run on the control host's cores); the engine runs
# one task (tests/bench/README.md: ~40 remote execs and an 8 MiB upload per host) on one of them,
# then on all three at once.
log "task on 1 host vs 3 hosts x $REPEAT"
echo "$BENCH_USER ALL=(ALL) NOPASSWD: ALL" >"$SUDOERS"
chmod 440 "$SUDOERS"
start_sshd h1 "$HOST_CPU"; H1=$PORT_OUT
start_sshd h2 "$HOST_CPU"; H2=$PORT_OUT
start_sshd h3 "$HOST_CPU"; H3=$PORT_OUT
TASK_DIR=$WORK/task
mkdir -p "$TASK_DIR"; chown "$BENCH_USER" "$TASK_DIR"
one=() three=()
for _ in $(seq "$REPEAT"); do
  one+=("$("${KX[@]}" --task-ports "$H1" --task-dir "$TASK_DIR" | field task_s)")
  three+=("$("${KX[@]}" --task-ports "$H1,$H2,$H3" --task-dir "$TASK_DIR" | field task_s)")
  for h in host1 host2 host3; do
    cmp -s "$TASK_DIR/$h/artifact.bin" "$TASK_DIR/host1/artifact.bin" || die "task output missing on $h"
    [ -s "$TASK_DIR/$h/done-9" ] || die "task commands did not run on $h"
  done
done
TASK1=$(printf '%s\n' "${one[@]}" | median)
TASK3=$(printf '%s\n' "${three[@]}" | median)

# --- table -------------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mbps() { awk -v a="$UPLOAD_MB" -v b="$1" 'BEGIN { printf "%.0f", a / b }'; }
printf '\n%-34s %12s %12s %8s\n' "measurement" "kubexm (s)" "openssh (s)" "ratio"
printf '%-34s %12.3f %12.3f %8s\n' "$N_EXECS x true (ControlMaster)" "$KX_EXEC" "$SSH_EXEC" "$(ratio "$KX_EXEC" "$SSH_EXEC")"
printf '%-34s %12.3f %12.3f %8s\n' "$UPLOAD_MB MiB upload vs scp" "$KX_UP" "$SCP_UP" "$(ratio "$KX_UP" "$SCP_UP")"
printf '%-34s %12.3f %12.3f %8s\n' "$UPLOAD_MB MiB upload vs ssh cat >" "$KX_UP" "$CAT_UP" "$(ratio "$KX_UP" "$CAT_UP")"
printf '%-34s %12.3f %12.3f %8s\n' "$UPLOAD_MB MiB exec 'cat >' vs ssh cat >" "$KX_CAT" "$CAT_UP" "$(ratio "$KX_CAT" "$CAT_UP")"
printf '%-34s %12.3f %12.3f %8s\n' "task on 3 hosts vs on 1 host" "$TASK3" "$TASK1" "$(ratio "$TASK3" "$TASK1")"
printf '\nupload throughput: kubexm %s MiB/s, scp %s MiB/s, ssh cat %s MiB/s\n' \
  "$(mbps "$KX_UP")" "$(mbps "$SCP_UP")" "$(mbps "$CAT_UP")"
printf 'transport only (exec cat > with the bytes on stdin): kubexm %s MiB/s\n' "$(mbps "$KX_CAT")"
printf 'runs (s): kubexm execs %s | ssh execs %s | kubexm upload %s | kubexm cat %s | scp %s | cat %s\n' \
  "${kx_exec[*]}" "${ssh_exec[*]}" "${kx_up[*]}" "${kx_cat[*]}" "${scp_up[*]}" "${cat_up[*]}"
printf 'runs (s): task 1 host %s | task 3 hosts %s (in that row the "openssh" column is kubexm on 1 host)\n' "${one[*]}" "${three[*]}"
printf 'targets: execs ratio <= 1.2, task 3 hosts / 1 host <= 1.3; the kubexm upload also checks the sha256 on the node (sha256sum) before and after.\n'

#!/usr/bin/env bash
# Benchmark of the SSH runner (kubexm-install's SshRunner, russh) against OpenSSH, on loopback.
#
# Starts one sshd (Debian's openssh-server) on 127.0.0.1 with its own host key and config, then,
# in one run:
#   1. execs:  N_EXECS (200) trivial commands (`true`) one after another through one SshRunner
#              (the `ssh_bench` example)  vs  the same through OpenSSH with a ControlMaster
#              (`ssh -o ControlPath=... HOST true`, master opened first)              (≤ 1.2×)
#   2. upload: a UPLOAD_MB (256) MiB random file with SshRunner::upload (remote sha256 check,
#              stream, sha256 verify, rename)  vs  `scp` and `ssh HOST 'cat > DEST' < FILE`
#              through the same ControlMaster
# and prints a table. See tests/bench/README.md.
#
# Environment (all optional):
#   N_EXECS=200      sequential trivial commands
#   UPLOAD_MB=256    upload size
#   REPEAT=3         each measurement runs REPEAT times; the median is reported
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
cleanup() {
  local rc=$?
  ssh -o ControlPath="$CTL" -O exit -p "${PORT:-22}" "$BENCH_USER@127.0.0.1" >/dev/null 2>&1 || true
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
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
ssh-keygen -q -t ed25519 -N '' -f "$WORK/host_ed25519"
ssh-keygen -q -t ed25519 -N '' -f "$WORK/id_ed25519"
cp "$WORK/id_ed25519.pub" "$WORK/authorized_keys"
chmod 644 "$WORK/authorized_keys"
PORT=$(free_port)
cat >"$WORK/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $WORK/host_ed25519
PidFile $WORK/sshd.pid
AuthorizedKeysFile $WORK/authorized_keys
UsePAM no
StrictModes no
PermitRootLogin yes
PasswordAuthentication no
KbdInteractiveAuthentication no
MaxStartups 100
Subsystem sftp internal-sftp
EOF
/usr/sbin/sshd -D -e -f "$WORK/sshd_config" 2>"$WORK/sshd.log" &
PIDS+=($!)
for _ in $(seq 200); do
  python3 -c "import socket,sys; s=socket.create_connection(('127.0.0.1',$PORT),1); sys.exit(0 if s.recv(4)==b'SSH-' else 1)" 2>/dev/null && break
  sleep 0.05
done
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$WORK/host_ed25519.pub")" >"$WORK/known_hosts"
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

# --- table -------------------------------------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mbps() { awk -v a="$UPLOAD_MB" -v b="$1" 'BEGIN { printf "%.0f", a / b }'; }
printf '\n%-34s %12s %12s %8s\n' "measurement" "kubexm (s)" "openssh (s)" "ratio"
printf '%-34s %12.3f %12.3f %8s\n' "$N_EXECS x true (ControlMaster)" "$KX_EXEC" "$SSH_EXEC" "$(ratio "$KX_EXEC" "$SSH_EXEC")"
printf '%-34s %12.3f %12.3f %8s\n' "$UPLOAD_MB MiB upload vs scp" "$KX_UP" "$SCP_UP" "$(ratio "$KX_UP" "$SCP_UP")"
printf '%-34s %12.3f %12.3f %8s\n' "$UPLOAD_MB MiB upload vs ssh cat >" "$KX_UP" "$CAT_UP" "$(ratio "$KX_UP" "$CAT_UP")"
printf '%-34s %12.3f %12.3f %8s\n' "$UPLOAD_MB MiB exec 'cat >' vs ssh cat >" "$KX_CAT" "$CAT_UP" "$(ratio "$KX_CAT" "$CAT_UP")"
printf '\nupload throughput: kubexm %s MiB/s, scp %s MiB/s, ssh cat %s MiB/s\n' \
  "$(mbps "$KX_UP")" "$(mbps "$SCP_UP")" "$(mbps "$CAT_UP")"
printf 'transport only (exec cat > with the bytes on stdin): kubexm %s MiB/s\n' "$(mbps "$KX_CAT")"
printf 'runs (s): kubexm execs %s | ssh execs %s | kubexm upload %s | kubexm cat %s | scp %s | cat %s\n' \
  "${kx_exec[*]}" "${ssh_exec[*]}" "${kx_up[*]}" "${kx_cat[*]}" "${scp_up[*]}" "${cat_up[*]}"
printf 'targets: execs ratio <= 1.2; the kubexm upload also checks the sha256 on the node (sha256sum) before and after.\n'

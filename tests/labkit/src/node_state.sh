# The fingerprint of what an install changes and a delete must put back on a node (files KubeXM
# edits, directories it fills, services it enables), compared before and after (tests/e2e.rs).
# The OS packages an install brings from the bundle stay installed after a delete (an air-gapped
# host may have no way to get them back): what belongs to packages that were not there before
# (/var/tmp/kubexm-lab-packages-before, written before the install) is left out, unless KubeXM
# wrote it. Runs on the node (sh -c over SSH).
hostname; cat /etc/hostname
    new=$( [ -e /var/tmp/kubexm-lab-packages-before ] && dpkg-query -W -f="\${Package}\n" | grep -vxFf /var/tmp/kubexm-lab-packages-before || true)
    owned=$(for p in $new; do dpkg -L "$p" 2>/dev/null; done | sort -u)
    ucf_new() { # a configuration file a new package made in its maintainer scripts (ucf), e.g. chrony.conf
      local p; p=$(ucfq -w "$1" 2>/dev/null | cut -d: -f2) || return 1
      [ -n "$p" ] && printf "%s\n" $new | grep -qxF -- "$p"; }
    script_new() { # what a new package's maintainer scripts make, owned by none: python3 (a dependency of fio) makes /var/lib/python
      case "$1" in /var/lib/python) printf "%s\n" $new | grep -qx "python3[.0-9]*\(-minimal\)\?";; *) false;; esac; }
    from_new() { [ -n "$owned" ] && { printf "%s\n" "$owned" | grep -qxF -- "$1" || ucf_new "$1" || script_new "$1"; }; }
    for f in /etc/hosts /etc/resolv.conf /etc/chrony/chrony.conf /etc/haproxy/haproxy.cfg /etc/keepalived/keepalived.conf /etc/fstab; do
      if from_new "$f" && ! head -n 1 "$f" 2>/dev/null | grep -q "^# Written by KubeXM"; then echo "absent or a new package's $f"
      elif [ -e "$f" ]; then md5sum "$f"; else echo "absent or a new package's $f"; fi; done
    for d in /usr/local/bin /usr/local/sbin /etc/sysctl.d /etc/modules-load.d /opt /var/lib/containerd /var/lib /etc/ssl; do
      echo "$d: $(ls -A "$d" 2>&1 | while read -r e; do from_new "$d/$e" || echo "$e"; done | tr "\n" " ")"; done
    for u in haproxy keepalived; do
      s=$(systemctl is-enabled $u 2>/dev/null) || true
      case "$s" in ""|disabled) echo "$u not enabled";; *) echo "$u $s";; esac; done
    echo "sources.list.d: $(ls -A /etc/apt/sources.list.d 2>&1 | tr "\n" " ")"; if [ -e /etc/apt/sources.list ]; then md5sum /etc/apt/sources.list; else echo "no /etc/apt/sources.list"; fi

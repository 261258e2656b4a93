#!/bin/sh
# guest-init.sh: /init of the neonbox test VM.
#
# Runs as PID 1 INSIDE the guest (busybox ash), never on the host. run.sh
# copies it into the initramfs and appends a per-run archive holding
# /etc/neonbox/run.conf (what to run) and /etc/ld.so.cache.
#
# Stages: move the root from the initramfs to a tmpfs, mount the API
# filesystems and cgroup2, enable every controller at the root, insmod the
# modules listed in /etc/neonbox/modules (Debian builds virtio, 9p, overlay
# and ext4 as modules), mount the 9p shares and the ext4 scratch disk, run the test binary in its own leaf cgroup, print
# "NEONBOX_VM_EXIT=<status>" on the console and power off. run.sh reads that
# line to get the exit status; any setup failure reports status 125.

PATH=/sbin:/bin:/usr/sbin:/usr/bin
export PATH
umask 022

fail() {
	echo "neonbox-vm: init: $*"
	echo
	echo "NEONBOX_VM_EXIT=125"
	sync
	poweroff -f
	echo o >/proc/sysrq-trigger
	sleep 1000
}

# Stage 1: the root is the initramfs (rootfs), where pivot_root(2) fails with
# EINVAL (see its man page), and the code under test pivots. Copy the tree
# into a tmpfs and switch_root to it; stage 2 runs this script again there.
if [ "${NEONBOX_STAGE:-1}" = 1 ]; then
	# The kernel opens /dev/console for us only if the initramfs has the
	# node (it does when run.sh ran as root); reopen it from devtmpfs.
	mount -t devtmpfs -o mode=0755,nosuid devtmpfs /dev || fail "mount /dev"
	exec </dev/console >/dev/console 2>&1
	mkdir -p /newroot
	mount -t tmpfs -o mode=0755 tmpfs /newroot || fail "mount the tmpfs root"
	for f in /* /.[!.]*; do
		case $f in /dev | /newroot | '/.[!.]*') continue ;; esac
		cp -a "$f" /newroot/ || fail "copy $f to the tmpfs root"
	done
	mkdir -p /newroot/dev
	mount --move /dev /newroot/dev || fail "move /dev"
	# shellcheck disable=SC2093 # fail runs only if exec does
	NEONBOX_STAGE=2 exec switch_root /newroot /init
	fail "switch_root"
fi

mount -t proc -o nosuid,nodev,noexec proc /proc || fail "mount /proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fail "mount /sys"
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=000 devpts /dev/pts || fail "mount /dev/pts"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /dev/shm || fail "mount /dev/shm"
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run || fail "mount /run"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs /tmp || fail "mount /tmp"

# cgroup v2 only (no v1 hierarchies), with systemd's mount options.
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup ||
	fail "mount cgroup2"
# shellcheck disable=SC2013 # one line of space-separated names
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
	if ! echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control; then
		case $c in
		cpu | memory | pids | io) fail "enable cgroup controller $c" ;;
		*) echo "neonbox-vm: init: warning: cannot enable cgroup controller $c" ;;
		esac
	fi
done

kver=$(uname -r)
while read -r m; do
	[ -n "$m" ] || continue
	insmod "/lib/modules/$kver/$m" || fail "insmod $m"
done </etc/neonbox/modules

[ -f /etc/neonbox/run.conf ] || fail "no /etc/neonbox/run.conf (per-run archive missing)"
# shellcheck source=/dev/null # written by run.sh
. /etc/neonbox/run.conf

i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
mount -t ext4 -o nosuid,nodev /dev/vda /scratch || fail "mount the ext4 scratch disk /dev/vda"
mkdir -p /scratch/tmp /scratch/home
chmod 1777 /scratch/tmp

p9opts=trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro
mount -t 9p -o "$p9opts" nbbin /neonbox/bin || fail "mount 9p share of the test binary's directory"
if [ "$NEONBOX_WORKDIR" = /neonbox/work ]; then
	mount -t 9p -o "$p9opts" nbwork /neonbox/work || fail "mount 9p share of the work directory"
fi
# The host's /usr, read-only over 9p, under a writable overlay whose upper
# layer is on the scratch disk: tests may write below /usr (as root does on a
# host) and their writes vanish with the VM.
if [ "$NEONBOX_HOST_USR" = 1 ]; then
	mkdir -p /run/neonbox/host-usr /scratch/.usr/upper /scratch/.usr/work
	mount -t 9p -o "$p9opts,nodev" nbusr /run/neonbox/host-usr || fail "mount 9p share of the host's /usr"
	mount -t overlay -o lowerdir=/run/neonbox/host-usr,upperdir=/scratch/.usr/upper,workdir=/scratch/.usr/work overlay /usr ||
		fail "mount the /usr overlay"
fi

hostname neonbox-vm
ip link set lo up || fail "bring up lo"

if [ "$NEONBOX_CGROUP" != / ]; then
	mkdir -p "/sys/fs/cgroup$NEONBOX_CGROUP" || fail "create cgroup $NEONBOX_CGROUP"
fi
cd "$NEONBOX_WORKDIR" || fail "cd $NEONBOX_WORKDIR"

# "$@" (set by run.conf) is: [NAME=VALUE...] /neonbox/bin/TEST [flags...].
(
	if [ "$NEONBOX_CGROUP" != / ]; then
		echo 0 >"/sys/fs/cgroup$NEONBOX_CGROUP/cgroup.procs" || exit 125
	fi
	exec env -i \
		HOME=/scratch/home \
		USER=root LOGNAME=root \
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		TMPDIR=/scratch/tmp \
		LANG=C.UTF-8 \
		TERM=dumb \
		NEONBOX_IN_VM=1 \
		NEONBOX_REQUIRE_PRIVILEGED=1 \
		"$@"
)
rc=$?

echo
echo "NEONBOX_VM_EXIT=$rc"
cd /
sync
umount /scratch 2>/dev/null
poweroff -f
echo o >/proc/sysrq-trigger
sleep 1000

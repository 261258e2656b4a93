#!/usr/bin/env bash
# run.sh: run a Go test binary inside a QEMU VM (TCG, no KVM) booted with
# Debian 12's own kernel (linux-image-amd64, 6.1), which has a pure cgroup v2
# hierarchy with all controllers, so cgroup-v2 and overlay code meets a real
# kernel that the host (hybrid cgroups) cannot offer.
#
# Usage: integration/vm/run.sh TEST_BINARY [go test flags...]
#   e.g. integration/vm/run.sh /tmp/cgroup.test -test.v -test.run TestX
#
# Exits with the test binary's exit status, or 125 when the VM could not run
# it (boot failure, timeout, setup error). See README.md for the variables.
#
# Runs on the HOST. guest-init.sh is the guest side.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${NEONBOX_VM_CACHE:-$here/.cache}
vm_timeout=${NEONBOX_VM_TIMEOUT:-20m}
vm_mem=${NEONBOX_VM_MEMORY:-2G}
vm_cpus=${NEONBOX_VM_CPUS:-2}
scratch_size=${NEONBOX_VM_SCRATCH_SIZE:-4G}
host_usr=${NEONBOX_VM_HOST_USR:-1}
vm_cgroup=${NEONBOX_VM_CGROUP:-/neonbox.test}
workdir=${NEONBOX_VM_WORKDIR:-}
extra_modules=${NEONBOX_VM_MODULES:-}
passenv=${NEONBOX_VM_PASSENV:-}

# Modules the guest needs and that Debian builds as modules (dependencies are
# added from modules.dep). crc32c_generic: ext4's metadata_csum asks the crypto
# API for crc32c at mount time, which no symbol dependency pulls in.
base_modules=(virtio_pci virtio_blk 9pnet_virtio 9p overlay ext4 crc32c_generic)

log() { printf 'vm: %s\n' "$*" >&2; }
die() {
	printf 'vm: error: %s\n' "$*" >&2
	exit 125
}

usage() {
	sed -n 's/^# \{0,1\}//; 7,8p' "${BASH_SOURCE[0]}" >&2
	exit 125
}

# shquote prints its argument as one single-quoted sh word.
shquote() {
	local s=${1//\'/\'\\\'\'}
	printf "'%s'" "$s"
}

# qemu_escape doubles the commas in a qemu option value.
qemu_escape() {
	printf '%s' "${1//,/,,}"
}

apt_get() {
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}

apt_updated=0
apt_update_once() {
	if ((apt_updated == 0)); then
		log "apt-get update"
		apt_get update -qq >&2
		apt_updated=1
	fi
}

# ensure_host_tools installs the host packages the runner needs, if missing.
ensure_host_tools() {
	local need=()
	command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
	dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)
	command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
	command -v cpio >/dev/null || need+=(cpio)
	command -v timeout >/dev/null || need+=(coreutils)
	command -v gzip >/dev/null || need+=(gzip)
	((${#need[@]} == 0)) && return 0
	[[ $EUID == 0 ]] || die "missing host packages: ${need[*]}; install them as root: apt-get install --no-install-recommends ${need[*]}"
	apt_update_once
	log "apt-get install ${need[*]}"
	apt_get install -y -qq --no-install-recommends "${need[@]}" >&2
}

# ensure_kernel sets kdir (an unpacked linux-image package with a modules.dep)
# and kver, downloading and unpacking the package on first use.
ensure_kernel() {
	mkdir -p "$cache/kernel"
	if [[ -f $cache/kernel/current ]]; then
		kver=$(<"$cache/kernel/current")
		kdir=$cache/kernel/$kver
		if [[ -f $kdir/.complete ]]; then
			return 0
		fi
	fi

	local pkg
	pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-6\./ { print $2; exit }') || true
	if [[ -z $pkg ]]; then
		[[ $EUID == 0 ]] || die "apt-cache knows no linux-image-amd64; run apt-get update as root"
		apt_update_once
		pkg=$(apt-cache depends linux-image-amd64 | awk '$1 == "Depends:" && $2 ~ /^linux-image-6\./ { print $2; exit }')
	fi
	[[ -n $pkg ]] || die "linux-image-amd64 depends on no linux-image-6.* package"
	kver=${pkg#linux-image-}
	kdir=$cache/kernel/$kver
	log "downloading $pkg (first run; cached in $cache/kernel)"

	local tmp
	tmp=$(mktemp -d "$cache/kernel/.download.XXXXXX")
	(cd "$tmp" && apt-get -o APT::Sandbox::User=root download "$pkg" >&2) || {
		rm -rf "$tmp"
		die "apt-get download $pkg failed"
	}
	dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp" || {
		rm -rf "$tmp"
		die "dpkg-deb -x $pkg failed"
	}
	rm -rf "${tmp:?}"/*.deb "${tmp:?}/usr"
	[[ -f $tmp/boot/vmlinuz-$kver && -d $tmp/lib/modules/$kver ]] || {
		rm -rf "$tmp"
		die "$pkg has no boot/vmlinuz-$kver or lib/modules/$kver"
	}
	# The package ships no modules.dep (its postinst runs depmod).
	busybox depmod -b "$tmp" "$kver" || {
		rm -rf "$tmp"
		die "depmod for $kver failed"
	}
	touch "$tmp/.complete"
	rm -rf "$kdir"
	mv "$tmp" "$kdir"
	echo "$kver" >"$cache/kernel/current"
}

# resolve_modules sets modules to the relative paths (as in modules.dep) of the
# wanted modules and their dependencies, each after what it depends on.
resolve_modules() {
	local moddir=$kdir/lib/modules/$kver
	declare -gA dep_of=() path_of=() seen=()
	local line mod deps name
	while IFS= read -r line; do
		mod=${line%%:*}
		deps=${line#*:}
		dep_of[$mod]=$deps
		name=${mod##*/}
		name=${name%%.ko*}
		path_of[${name//-/_}]=$mod
	done <"$moddir/modules.dep"

	modules=()
	local want
	for want in "${base_modules[@]}" $extra_modules; do
		want=${want//-/_}
		if [[ -n ${path_of[$want]:-} ]]; then
			visit_module "${path_of[$want]}"
		elif sed 's,.*/,,; s/\.ko.*//; s/-/_/g' "$moddir/modules.builtin" | grep -qx -- "$want"; then
			: # built into the kernel
		else
			die "kernel $kver has no module $want"
		fi
	done
}

visit_module() {
	local mod=$1 d
	[[ -n ${seen[$mod]:-} ]] && return 0
	seen[$mod]=1
	for d in ${dep_of[$mod]}; do
		visit_module "$d"
	done
	modules+=("$mod")
}

# ensure_base_initramfs sets base_initrd to a cached gzip'd newc cpio with
# busybox, the host's loader and libc, the modules and guest-init.sh as /init.
ensure_base_initramfs() {
	local key
	key=$(
		{
			echo "$kver"
			printf '%s\n' "${modules[@]}"
			dpkg-query -W -f='${Version}\n' busybox-static libc6
			cat "$here/guest-init.sh" "${BASH_SOURCE[0]}"
		} | sha256sum | cut -c1-16
	)
	base_initrd=$cache/initramfs/base-$key.cpio.gz
	[[ -f $base_initrd ]] && return 0

	log "building the base initramfs"
	mkdir -p "$cache/initramfs"
	local stage
	stage=$(mktemp -d "$cache/initramfs/.stage.XXXXXX")
	(
		set -euo pipefail
		cd "$stage"
		mkdir -p bin sbin usr/bin usr/sbin usr/lib/x86_64-linux-gnu usr/lib64 \
			lib/modules etc/neonbox dev proc sys run tmp root mnt scratch \
			neonbox/bin neonbox/work
		# Merged /usr like the host, so a 9p mount of the host's /usr over
		# /usr brings its programs and libraries with their usual paths.
		ln -s usr/lib64 lib64
		ln -s ../usr/lib/x86_64-linux-gnu lib/x86_64-linux-gnu

		cp /bin/busybox bin/busybox
		local p
		while IFS= read -r p; do
			[[ $p == bin/busybox || -e $p || -L $p ]] && continue
			mkdir -p "$(dirname "$p")"
			ln -s /bin/busybox "$p"
		done < <(bin/busybox --list-full)

		# The loader and libc, so a dynamically linked program copied into
		# the guest can run without the /usr share.
		cp -L /lib64/ld-linux-x86-64.so.2 usr/lib64/
		local l
		for l in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libresolv.so.2; do
			cp -L "/lib/x86_64-linux-gnu/$l" usr/lib/x86_64-linux-gnu/
		done

		local moddir=$kdir/lib/modules/$kver m
		mkdir -p "lib/modules/$kver"
		: >"lib/modules/$kver/modules.dep"
		: >etc/neonbox/modules
		for m in "${modules[@]}"; do
			mkdir -p "lib/modules/$kver/$(dirname "$m")"
			case $m in
			*.ko) cp "$moddir/$m" "lib/modules/$kver/$m" ;;
			*.ko.xz) xz -dc "$moddir/$m" >"lib/modules/$kver/${m%.xz}" ;;
			*.ko.zst) zstd -qdc "$moddir/$m" >"lib/modules/$kver/${m%.zst}" ;;
			*.ko.gz) gzip -dc "$moddir/$m" >"lib/modules/$kver/${m%.gz}" ;;
			*) die "unknown module format: $m" ;;
			esac
			echo "${m%.ko*}.ko" >>etc/neonbox/modules
			grep -E "^${m//./\\.}:" "$moddir/modules.dep" | sed 's/\.ko\.[a-z]*/.ko/g' >>"lib/modules/$kver/modules.dep"
		done

		cat >etc/passwd <<-'EOF'
			root:x:0:0:root:/root:/bin/sh
			nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
		EOF
		cat >etc/group <<-'EOF'
			root:x:0:
			tty:x:5:
			nogroup:x:65534:
		EOF
		echo neonbox-vm >etc/hostname
		if [[ $EUID == 0 ]]; then
			mknod -m 600 dev/console c 5 1
		fi
		install -m 0755 "$here/guest-init.sh" init

		find . -mindepth 1 -print0 | LC_ALL=C sort -z |
			cpio --null -o -H newc -R 0:0 --quiet | gzip -1 >"$stage.cpio.gz"
	) || {
		rm -rf "$stage" "$stage.cpio.gz"
		die "building the initramfs failed"
	}
	rm -rf "$stage"
	rm -f "$cache"/initramfs/base-*.cpio.gz
	mv "$stage.cpio.gz" "$base_initrd"
}

main() {
	(($# >= 1)) || usage
	case $1 in -h | --help) usage ;; esac
	local bin
	bin=$(realpath -e -- "$1") || die "no such test binary: $1"
	shift
	[[ -f $bin && -x $bin ]] || die "not an executable file: $bin"
	[[ $host_usr == 0 || $host_usr == 1 ]] || die "NEONBOX_VM_HOST_USR must be 0 or 1"
	[[ $vm_cgroup == / || $vm_cgroup =~ ^(/[A-Za-z0-9_.-]+)+$ ]] || die "bad NEONBOX_VM_CGROUP: $vm_cgroup"
	if [[ -n $workdir ]]; then
		workdir=$(realpath -e -- "$workdir") || die "no such NEONBOX_VM_WORKDIR"
		[[ -d $workdir ]] || die "NEONBOX_VM_WORKDIR is not a directory: $workdir"
	fi

	ensure_host_tools
	mkdir -p "$cache"
	# One run at a time fills the cache.
	exec 9>"$cache/.lock"
	flock 9
	ensure_kernel
	resolve_modules
	ensure_base_initramfs
	flock -u 9
	exec 9>&-

	# run and qemu_pid are global: cleanup reads them.
	run=$(mktemp -d "${TMPDIR:-/tmp}/neonbox-vm.XXXXXX")
	qemu_pid=
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	# Per-run archive, appended to the base one: the kernel unpacks
	# concatenated compressed cpio archives in order.
	mkdir -p "$run/stage/etc/neonbox"
	{
		echo "NEONBOX_HOST_USR=$host_usr"
		echo "NEONBOX_CGROUP=$(shquote "$vm_cgroup")"
		if [[ -n $workdir ]]; then
			echo "NEONBOX_WORKDIR=/neonbox/work"
		else
			echo "NEONBOX_WORKDIR=/scratch"
		fi
		printf 'set --'
		local v
		for v in $passenv; do
			[[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad name in NEONBOX_VM_PASSENV: $v"
			[[ -v $v ]] && printf ' %s' "$(shquote "$v=${!v}")"
		done
		printf ' %s' "$(shquote "/neonbox/bin/$(basename "$bin")")"
		local a
		for a in "$@"; do
			printf ' %s' "$(shquote "$a")"
		done
		echo
	} >"$run/stage/etc/neonbox/run.conf"
	if [[ $host_usr == 1 && -f /etc/ld.so.cache ]]; then
		cp /etc/ld.so.cache "$run/stage/etc/ld.so.cache"
	fi
	(cd "$run/stage" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
		cpio --null -o -H newc -R 0:0 --quiet | gzip -1) >"$run/run.cpio.gz"
	cat "$base_initrd" "$run/run.cpio.gz" >"$run/initrd"

	truncate -s "$scratch_size" "$run/scratch.img"
	mkfs.ext4 -q -F -L neonbox-scratch "$run/scratch.img" >&2

	local qemu=(
		qemu-system-x86_64
		-machine q35 -accel tcg -cpu max -smp "$vm_cpus" -m "$vm_mem"
		-display none -serial stdio -monitor none -no-reboot -nic none
		-kernel "$kdir/boot/vmlinuz-$kver"
		-initrd "$run/initrd"
		-append 'console=ttyS0 panic=-1 quiet'
		-drive "file=$run/scratch.img,format=raw,if=virtio,cache=unsafe"
		-virtfs "local,path=$(qemu_escape "$(dirname "$bin")"),mount_tag=nbbin,security_model=none,readonly=on,multidevs=remap"
	)
	if [[ $host_usr == 1 ]]; then
		qemu+=(-virtfs "local,path=/usr,mount_tag=nbusr,security_model=none,readonly=on,multidevs=remap")
	fi
	if [[ -n $workdir ]]; then
		qemu+=(-virtfs "local,path=$(qemu_escape "$workdir"),mount_tag=nbwork,security_model=none,readonly=on,multidevs=remap")
	fi

	log "booting Debian kernel $kver under TCG: $(basename "$bin")${*:+ $*} (timeout $vm_timeout)"
	local start=$SECONDS st
	# qemu runs in the background so that an interrupt of this script can
	# end it by pid; its console goes through a fifo to stdout and the log.
	mkfifo "$run/console"
	sed -u 's/\r$//' <"$run/console" | tee "$run/console.log" &
	local reader=$!
	timeout -k 10 "$vm_timeout" "${qemu[@]}" </dev/null >"$run/console" 2>&1 &
	qemu_pid=$!
	set +e
	wait "$qemu_pid"
	st=$?
	set -e
	qemu_pid=
	wait "$reader" || true
	local took=$((SECONDS - start))
	cp "$run/console.log" "$cache/last-console.log"

	local rc
	rc=$(<"$run/console.log" tr -d '\r' | grep -aE '^NEONBOX_VM_EXIT=[0-9]+$' | tail -n 1 | cut -d= -f2) || true
	if [[ -z $rc ]]; then
		if ((st == 124 || st == 137)); then
			die "the VM did not finish within $vm_timeout (NEONBOX_VM_TIMEOUT); console log: $cache/last-console.log"
		fi
		die "the guest reported no exit status (boot failure or guest crash; qemu exit status $st); console log: $cache/last-console.log"
	fi
	log "guest exit status $rc; boot to power-off took ${took}s"
	return "$rc"
}

cleanup() {
	if [[ -n ${qemu_pid:-} ]]; then
		kill "$qemu_pid" 2>/dev/null || true
		wait "$qemu_pid" 2>/dev/null || true
	fi
	if [[ -n ${run:-} ]]; then
		rm -rf "$run"
	fi
}

main "$@"

#!/usr/bin/env bash
# Builds libseccomp as a static musl library in DIR (default build/musl),
# for the static neonbox-ns binary that `make build` links with musl-gcc:
# DIR/lib/libseccomp.a, its header and pkg-config file, and the kernel's
# uapi headers (linux/, asm/, asm-generic/), which musl-gcc does not look
# for in /usr/include. The source is Debian's source package of the
# libseccomp-dev installed here (or, if the mirror no longer has that
# version, its newest), fetched with apt, whose signed Sources index
# vouches for it, and patched as Debian patches it. apt runs with a
# private state, cache and sources (this machine's entries, as deb-src)
# and without the system's update hooks. Does nothing when DIR was built
# from the same inputs. Needs install-deps.sh's packages.
set -euo pipefail

out=${1:-build/musl}
arch=$(dpkg --print-architecture)
ver=$(dpkg-query -W -f='${source:Version}' "libseccomp-dev:$arch")
stamp=$(
	{
		echo "$ver"
		dpkg-query -W -f='${Version}\n' "linux-libc-dev:$arch" musl-tools
		cat "$0"
		realpath -m "$out"
	} | sha256sum | cut -d' ' -f1
)
if [ -f "$out/lib/libseccomp.a" ] && [ "$(cat "$out/STAMP" 2>/dev/null)" = "$stamp" ]; then
	exit 0
fi
echo "musl-seccomp: building libseccomp $ver with musl in $out"
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log="$tmp/log"
quiet() {
	"$@" >>"$log" 2>&1 || {
		cat "$log" >&2
		echo "musl-seccomp: failed: $*" >&2
		echo "musl-seccomp: without Debian's source packages, build with glibc: make build LIBC=glibc" >&2
		exit 1
	}
}

# apt-get source needs deb-src entries: this machine's own sources, as
# deb-src. An entry without sources (a third party's, say) only warns.
mkdir -p "$tmp/apt/parts" "$tmp/apt/lists/partial" "$tmp/apt/cache/archives/partial"
if [ -f /etc/apt/sources.list ]; then
	sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list >"$tmp/apt/sources.list"
else
	: >"$tmp/apt/sources.list"
fi
for f in /etc/apt/sources.list.d/*.list; do
	[ -f "$f" ] && sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" >"$tmp/apt/parts/$(basename "$f")"
done
for f in /etc/apt/sources.list.d/*.sources; do
	[ -f "$f" ] && sed 's/^Types:.*/Types: deb-src/' "$f" >"$tmp/apt/parts/$(basename "$f")"
done
printf '#clear APT::Update::Pre-Invoke;\n#clear APT::Update::Post-Invoke;\n#clear APT::Update::Post-Invoke-Success;\n' >"$tmp/apt/apt.conf"
apt=(apt-get -q -c "$tmp/apt/apt.conf" -o "Dir::Etc::SourceList=$tmp/apt/sources.list" -o "Dir::Etc::SourceParts=$tmp/apt/parts"
	-o "Dir::State::Lists=$tmp/apt/lists" -o "Dir::Cache=$tmp/apt/cache" -o APT::Sandbox::User=root)
"${apt[@]}" update >>"$log" 2>&1 || echo "musl-seccomp: apt-get update reported errors; trying the sources it found" >&2
if ! (cd "$tmp" && "${apt[@]}" source --download-only "libseccomp=$ver" >>"$log" 2>&1); then
	echo "musl-seccomp: libseccomp $ver's source is not on the mirror; taking its newest" >&2
	(cd "$tmp" && quiet "${apt[@]}" source --download-only libseccomp)
fi
quiet dpkg-source -x "$tmp"/libseccomp_*.dsc "$tmp/src"

# The kernel's uapi headers (linux-libc-dev), for libseccomp and for
# neonbox-ns's own C code.
multiarch=$(gcc -print-multiarch)
rm -rf "$out/include"
mkdir -p "$out/include"
cp -r /usr/include/linux /usr/include/asm-generic "$out/include/"
cp -r "/usr/include/$multiarch/asm" "$out/include/"

cd "$tmp/src"
quiet ./configure CC=musl-gcc CFLAGS="-O2 -idirafter $out/include" \
	--enable-static --disable-shared --prefix="$out"
quiet make -j"$(nproc)" -C src
quiet make -C src install
quiet make -C include install
quiet make install-pkgconfDATA
echo "$stamp" >"$out/STAMP"
echo "musl-seccomp: ok"

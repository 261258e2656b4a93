#!/usr/bin/env bash
# Installs what building and testing neonbox-ns needs on a Debian 12 (or
# newer) machine, as root. Safe to run again: it only installs what is
# missing.
set -euo pipefail

GO_MIN=${NEONBOX_GO_MIN:-1.26}         # go.mod's go line
GO_ROOT=${NEONBOX_GO_ROOT:-/usr/local/go}
GO_BOOTSTRAP=1.26.8          # fetched when no Go >= GO_MIN is installed
# musl-tools, gperf and dpkg-dev: the static musl build of bin/neonbox-ns
# and of libseccomp for it (scripts/musl-seccomp.sh).
PACKAGES=(gcc libc6-dev make pkg-config libseccomp-dev musl-tools gperf dpkg-dev python3 util-linux diffutils bubblewrap git)

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: run as root (apt-get and /usr/local need it)" >&2
	exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "install-deps: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

export PATH="$GO_ROOT/bin:$PATH"
go_ok() {
	command -v go >/dev/null 2>&1 || return 1
	local v
	v=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || return 1
	[ "$(printf '%s\n%s\n' "$GO_MIN" "$v" | sort -V | head -n1)" = "$GO_MIN" ]
}
if ! go_ok; then
	# Debian's own Go is older than go.mod needs. Any Go can fetch a newer
	# toolchain as an ordinary module through the module proxy.
	echo "install-deps: installing Go $GO_BOOTSTRAP"
	if ! command -v go >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go ca-certificates
	fi
	tmp=$(mktemp -d)
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	dir=$(cd "$tmp" && GOFLAGS=-mod=mod GOMODCACHE="$tmp/mod" GOTOOLCHAIN=local \
		go mod download -json "golang.org/toolchain@v0.0.1-go${GO_BOOTSTRAP}.linux-amd64" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$dir" ] && [ -f "$dir/bin/go" ] || { echo "install-deps: could not fetch Go $GO_BOOTSTRAP" >&2; exit 1; }
	rm -rf "$GO_ROOT"
	cp -r "$dir" "$GO_ROOT"
	chmod -R u+w,a+rX "$GO_ROOT"
	chmod a+x "$GO_ROOT"/bin/* "$GO_ROOT"/pkg/tool/*/*
	hash -r
	go_ok || { echo "install-deps: Go in $GO_ROOT does not run" >&2; exit 1; }
fi
echo "install-deps: ok ($(go version))"

package smoke

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Magic numbers from include/uapi/linux/magic.h.
const (
	cgroup2SuperMagic = 0x63677270
	ext4SuperMagic    = 0xef53
)

const cgroupRoot = "/sys/fs/cgroup"

// requireVM skips t unless it runs inside the VM, whose /init sets
// NEONBOX_IN_VM=1. Not a capability skip: NEONBOX_REQUIRE_PRIVILEGED does not
// turn it into a failure, so `go test ./...` on the host stays green.
func requireVM(t *testing.T) {
	t.Helper()
	if os.Getenv("NEONBOX_IN_VM") != "1" {
		t.Skip("not inside the test VM (NEONBOX_IN_VM != 1); run through integration/vm/run.sh")
	}
}

func statfsType(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(&os.PathError{Op: "statfs", Path: path, Err: err})
	}
	return int64(st.Type)
}

func TestCgroupRootIsCgroup2(t *testing.T) {
	requireVM(t)
	if got := statfsType(t, cgroupRoot); got != cgroup2SuperMagic {
		t.Fatalf("%s has filesystem magic %#x, want CGROUP2_SUPER_MAGIC %#x", cgroupRoot, got, cgroup2SuperMagic)
	}
}

func TestCgroupControllers(t *testing.T) {
	requireVM(t)
	for _, file := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		b, err := os.ReadFile(filepath.Join(cgroupRoot, file))
		if err != nil {
			t.Fatal(err)
		}
		have := strings.Fields(string(b))
		t.Logf("root %s: %v", file, have)
		for _, want := range []string{"memory", "cpu", "pids", "io"} {
			if !slices.Contains(have, want) {
				t.Errorf("root %s lacks %q: %v", file, want, have)
			}
		}
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("/proc/self/cgroup: %s", bytes.TrimSpace(self))
	if !bytes.HasPrefix(self, []byte("0::/")) || bytes.Count(self, []byte("\n")) != 1 {
		t.Errorf("want only a cgroup v2 entry in /proc/self/cgroup, got %q", self)
	}
}

func TestChildCgroupHasMemoryPeak(t *testing.T) {
	requireVM(t)
	dir := filepath.Join(cgroupRoot, fmt.Sprintf("neonbox-smoke-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil {
			t.Errorf("rmdir cgroup: %v", err)
		}
	})

	b, err := os.ReadFile(filepath.Join(dir, "memory.peak"))
	if err != nil {
		t.Fatalf("memory.peak in a new child cgroup: %v", err)
	}
	if _, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
		t.Errorf("memory.peak = %q, want a byte count", b)
	}
	for _, f := range []string{"memory.max", "cpu.max", "pids.max", "cgroup.kill", "cgroup.freeze"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("child cgroup: %v", err)
		}
	}
}

// TestOverlayUserxattrInUserNamespace mounts an overlay with userxattr from a
// new user+mount namespace on the ext4 scratch disk, then replaces a lower
// directory (needs an opaque dir, which fails with EIO without userxattr) and
// deletes a lower file (a whiteout).
func TestOverlayUserxattrInUserNamespace(t *testing.T) {
	requireVM(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare program in the VM: ", err)
	}
	base := t.TempDir()
	if got := statfsType(t, base); got != ext4SuperMagic {
		t.Fatalf("TMPDIR %s has filesystem magic %#x, want ext4 (%#x)", base, got, ext4SuperMagic)
	}
	lower, upper, work, merged := filepath.Join(base, "lower"), filepath.Join(base, "upper"),
		filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{filepath.Join(lower, "d"), upper, work, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{"f": "lower f\n", "d/old": "old\n"} {
		if err := os.WriteFile(filepath.Join(lower, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	script := `set -e
mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3,userxattr" "$4"
rm "$4/f"
rm -r "$4/d"
mkdir "$4/d"
echo new > "$4/d/new"
ls -A "$4/d"
`
	cmd := exec.Command(unshare, "-Urm", "sh", "-c", script, "sh", lower, upper, work, merged)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "new" {
		t.Errorf("replaced dir lists %q, want only \"new\" (an opaque dir)", got)
	}

	fi, err := os.Lstat(filepath.Join(upper, "f"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeCharDevice == 0 || st.Rdev != 0 {
		t.Errorf("upper/f is %v rdev %d, want a 0:0 char device whiteout", fi.Mode(), st.Rdev)
	}
	buf := make([]byte, 16)
	n, err := syscall.Getxattr(filepath.Join(upper, "d"), "user.overlay.opaque", buf)
	if err != nil {
		t.Fatalf("getxattr upper/d user.overlay.opaque: %v", err)
	}
	if got := string(buf[:n]); got != "y" {
		t.Errorf("user.overlay.opaque = %q, want \"y\"", got)
	}
	if _, err := os.Stat(filepath.Join(lower, "d", "old")); err != nil {
		t.Errorf("lower layer changed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(upper, "d", "old")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("upper/d/old: want not exist, got %v", err)
	}
}

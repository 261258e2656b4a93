// Package smoke holds a smoke test for the VM test runner in integration/vm:
// its tests check, inside the VM, that the guest kernel offers what the
// runner promises (a pure cgroup v2 hierarchy with the memory, cpu and pids
// controllers, memory.peak, overlayfs with userxattr on the ext4 scratch
// disk). Outside the VM (NEONBOX_IN_VM unset) every test skips.
//
// Build and run:
//
//	CGO_ENABLED=0 go test -c -o /tmp/smoke.test ./integration/vm/smoke/
//	integration/vm/run.sh /tmp/smoke.test -test.v
package smoke

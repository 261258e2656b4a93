// Package cgroup gives each run a fresh cgroup with resource limits, reads
// what the run used, and kills and removes it afterwards.
//
// It runs in the parent (the neonbox-ns process on the host), never in the
// jail: the jail's init is placed in the cgroup either at clone time
// (CLONE_INTO_CGROUP, cgroup v2) or by Add right after it starts.
//
// # Where run cgroups live
//
// Every run cgroup sits below the cgroup that our own process is in, never
// elsewhere, so the package only ever creates, writes and removes cgroups
// that it made itself (plus, on v2, our own cgroup's
// cgroup.subtree_control, see below):
//
//	v2:  <mount>/<our cgroup>/neonbox/<name>
//	v1:  <mount of ctrl>/<our cgroup in ctrl>/neonbox/<name>   for ctrl in
//	     memory, cpu, cpuacct, pids, freezer (those that are mounted;
//	     cpu only for a CPU limit; not the freezer for a
//	     Host.WithoutFreezer)
//
// "Our cgroup" is read from /proc/self/cgroup and resolved against the
// mount's root in /proc/self/mountinfo, so that it also works inside a
// cgroup namespace or below a bind-mounted subtree. The neonbox directory
// is shared by the runs of all neonbox-ns processes in that cgroup; the
// last run to be deleted removes it (rmdir fails while others remain).
//
// # cgroup v2
//
// A controller reaches <name> only if it is enabled in the
// cgroup.subtree_control of every ancestor. New enables the controllers a
// limit needs in neonbox/ (which never holds processes) and, when our own
// cgroup does not already delegate them, in our own cgroup too. The kernel's
// no-internal-processes rule (Documentation/admin-guide/cgroup-v2.rst,
// "No Internal Process Constraint") refuses that while our cgroup holds
// processes, unless it is the root cgroup; if the only process there is us,
// New moves us into the leaf <our cgroup>/neonbox-self first. That leaf
// holds our process until it exits and so is not removed; if other
// processes share our cgroup New fails and says so (start neonbox-ns in a
// delegated cgroup of its own, e.g. systemd-run --scope -p Delegate=yes).
// memory.swap.max is set to 0 next to memory.max, so that a memory limit is
// not stretched by swap.
//
// # cgroup v1 (and hybrid hosts)
//
// On a hybrid host (v1 controllers under /sys/fs/cgroup/<ctrl>, a
// controller-less cgroup2 at /sys/fs/cgroup/unified) limits need v1, and
// Detect reports v1. The run gets a directory in each v1 hierarchy it
// uses (above); the freezer, when mounted, makes Kill race-free against fork (processes in
// a pid namespace of their own need it not: Host.WithoutFreezer). Where the
// memory.memsw.* files exist the memsw limit is set equal to the memory
// limit.
//
// The package writes the limit files itself (memory.max, memory.swap.max,
// cpu.max and pids.max; on v1 memory.limit_in_bytes,
// memory.memsw.limit_in_bytes, cpu.cfs_period_us, cpu.cfs_quota_us and
// pids.max) and reads /proc/<pid>/cgroup with
// github.com/containerd/cgroups/v3. It does not use that module's cgroup1
// and cgroup2 managers: what they link (protobuf, cilium/ebpf, godbus)
// is half of neonbox-ns's binary and about 0.5 ms of every start of it,
// for a handful of writes; and they do not fit: the package must create a
// cgroup exclusively (a leftover of the same name is an error, not
// reused), remove it with rmdir only, and never touch cgroups above its
// own (containerd's cgroup2.NewManager writes cgroup.subtree_control up to
// the mount's root, and both managers delete with os.RemoveAll).
package cgroup

package cgroup

import (
	"fmt"
	"os/exec"
	"testing"

	"github.com/neonbox/neonbox-ns/internal/testutil"
)

// BenchmarkLifecycle measures one run's cgroup work: create with limits,
// add a process, read stats, kill and delete. Each step is also timed on
// its own (see the sub-benchmarks).
func BenchmarkLifecycle(b *testing.B) {
	testutil.RequireRoot(b)
	if v, why := Detect(); v == None {
		testutil.Skip(b, why)
	}
	l := Limits{MemoryBytes: 256 << 20, CPUs: 1, Pids: 128}
	steps := []string{"new", "add", "stats", "kill", "delete"}
	for _, only := range append([]string{"all"}, steps...) {
		b.Run(only, func(b *testing.B) {
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				cmd := exec.Command("sleep", "60")
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				timed := func(step string, f func() error) {
					if only == "all" || only == step {
						b.StartTimer()
					}
					err := f()
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
				}
				var c *Cgroup
				timed("new", func() (err error) { c, err = New(fmt.Sprintf("bench-%d", i), l); return err })
				timed("add", func() error { return c.Add(cmd.Process.Pid) })
				timed("stats", func() error { _, err := c.Stats(); return err })
				timed("kill", c.Kill)
				_ = cmd.Wait()
				timed("delete", c.Delete)
			}
		})
	}
}

// BenchmarkProbe measures finding the host's hierarchies and this
// process's cgroups in them, which each run does once.
func BenchmarkProbe(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if h := Probe(); h == nil {
			b.Fatal("no host")
		}
	}
}

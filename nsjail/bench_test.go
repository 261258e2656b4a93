package nsjail_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/testutil"
	"github.com/neonbox/neonbox-ns/nsjail"
)

// BenchmarkRun runs a small change (one file written) in a jail over a
// workspace of 10 files and one of 100,000, alternately (so that the
// machine's drift lands on both alike), committed and rolled back, and
// reports for each size the median of each phase of the receipt: setup
// (Run to CMD's execve), spawn (clone to execve), run, commit or
// rollback, teardown. Setup and rollback must not grow with the
// workspace: overlayfs mounts it as it is, and only the upper dir is
// walked.
func BenchmarkRun(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireUserNS(b)
	// Both workspaces are made, and written out, before anything is
	// timed.
	sizes := []struct {
		files int
		label string
		base  string
	}{{10, "10", ""}, {100000, "100k", ""}}
	for i := range sizes {
		sizes[i].base = testutil.WorldTraversableTempDir(b)
		if err := makeWorkspace(filepath.Join(sizes[i].base, "ws"), sizes[i].files); err != nil {
			b.Fatal(err)
		}
	}
	if err := syncFS(sizes[0].base); err != nil {
		b.Fatal(err)
	}
	for _, commit := range []nsjail.CommitMode{nsjail.CommitNever, nsjail.CommitOnSuccess} {
		b.Run("commit="+string(commit), func(b *testing.B) {
			phases := map[string][]float64{}
			for b.Loop() {
				for _, sz := range sizes {
					r, err := nsjail.Run(context.Background(), nsjail.Options{
						Command:   []string{"sh", "-c", "echo x > out.txt"},
						Workspace: filepath.Join(sz.base, "ws"), StateDir: filepath.Join(sz.base, "state"), Commit: commit,
						Stdout: io.Discard, Stderr: io.Discard, HostEnv: []string{"PATH=/usr/bin:/bin"},
					})
					if err != nil || r.Status != nsjail.StatusSuccess {
						b.Fatalf("%v %+v", err, r)
					}
					for name, v := range map[string]float64{
						"setup": r.SetupMS, "spawn": r.Phases.SpawnMS, "run": r.Phases.RunMS,
						"commit-or-rollback": r.Phases.FinishMS, "teardown": r.Phases.TeardownMS,
					} {
						key := name + "-" + sz.label + "-files-ms"
						phases[key] = append(phases[key], v)
					}
				}
			}
			// One metric per phase and size, as benchstat reads them.
			for key, vs := range phases {
				b.ReportMetric(median(vs), key)
			}
		})
	}
}

// syncFS writes out the filesystem that holds dir.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

func makeWorkspace(dir string, files int) error {
	for i := 0; i < files; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i%1000))
		if i < 1000 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkPoolExec runs /bin/true through a Pool: the jail was prepared
// ahead, so a call costs handing the command over, the exec, the wait and
// an (empty) commit; teardown happens in the background.
func BenchmarkPoolExec(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireUserNS(b)
	base := testutil.WorldTraversableTempDir(b)
	ws, state := filepath.Join(base, "ws"), filepath.Join(base, "state")
	if err := os.Mkdir(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	p, err := nsjail.NewPool(context.Background(), nsjail.Options{Workspace: ws, StateDir: state, HostEnv: []string{"PATH=/usr/bin:/bin"}}, 4)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	var lat []float64
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		// Calls spaced out so the pool has a jail ready: this measures a
		// call's latency, not how fast the pool can prepare jails.
		time.Sleep(25 * time.Millisecond)
		b.StartTimer()
		t0 := time.Now()
		r, err := p.Exec(context.Background(), nsjail.Options{Command: []string{"/bin/true"}})
		if err != nil || r.Status != nsjail.StatusSuccess {
			b.Fatalf("%v %+v", err, r)
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		b.StopTimer()
	}
	b.ReportMetric(median(lat), "median-ms")
}

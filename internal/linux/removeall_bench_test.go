package linux_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

// runDirLike makes what a finished run leaves in its run dir: overlay's
// work dir (work/work/incompat/volatile/dirty) and an upper dir with
// files CMD wrote.
func runDirLike(b *testing.B, dir string, files int) {
	b.Helper()
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "work", "work", "incompat", "volatile"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "work", "work", "incompat", "volatile", "dirty"), nil, 0o600))
	must(os.MkdirAll(filepath.Join(dir, "upper", "sub"), 0o755))
	for i := range files {
		must(os.WriteFile(filepath.Join(dir, "upper", "sub", fmt.Sprintf("f%d", i)), []byte("x"), 0o644))
	}
}

// BenchmarkRemoveRunDir removes a run dir's contents as a run's cleanup
// does (linux.RemoveAll), against os.RemoveAll.
func BenchmarkRemoveRunDir(b *testing.B) {
	for _, files := range []int{0, 100} {
		for _, impl := range []struct {
			name   string
			remove func(string) error
		}{{"os", os.RemoveAll}, {"linux", linux.RemoveAll}} {
			b.Run(fmt.Sprintf("files=%d/%s", files, impl.name), func(b *testing.B) {
				base := b.TempDir()
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					dir := filepath.Join(base, fmt.Sprint(i))
					runDirLike(b, dir, files)
					b.StartTimer()
					if err := impl.remove(dir); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

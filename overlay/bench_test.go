package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCommit1000 commits 1,000 changed files (500 new, 500
// rewritten) as a transaction. Entries move by rename(2): the cost does
// not depend on their size (TestApplyMovesByRename checks the inodes).
func BenchmarkCommit1000(b *testing.B) {
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		base := b.TempDir()
		ws, up := filepath.Join(base, "ws"), filepath.Join(base, "up")
		for _, d := range []string{ws, up} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		for j := 0; j < 500; j++ {
			must(b, os.WriteFile(filepath.Join(ws, fmt.Sprintf("old%d", j)), []byte("old"), 0o644))
			must(b, os.WriteFile(filepath.Join(up, fmt.Sprintf("old%d", j)), make([]byte, 64<<10), 0o644))
			must(b, os.WriteFile(filepath.Join(up, fmt.Sprintf("new%d", j)), make([]byte, 64<<10), 0o644))
		}
		upT, _ := OpenDirTree(up, true)
		wsT, _ := OpenDirTree(ws, false)
		b.StartTimer()
		plan, err := PlanCommit(upT, wsT, Identity)
		if err == nil {
			err = Commit(plan, up, ws, filepath.Join(base, "txn"), "bench", Identity, nil)
		}
		b.StopTimer()
		upT.Close()
		wsT.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Fatal(err)
	}
}

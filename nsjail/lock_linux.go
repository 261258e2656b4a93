package nsjail

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/neonbox/neonbox-ns/internal/linux"
)

// DefaultLockTimeout is how long a run waits for a workspace another run
// holds.
const DefaultLockTimeout = 30 * time.Second

// ErrWorkspaceBusy is returned when another run holds the workspace past
// the lock timeout.
var ErrWorkspaceBusy = errors.New("workspace is in use by another run")

// workspaceLock is an exclusive flock(2) on a file named after the
// workspace's path in the state dir. Overlayfs does not allow the lower
// layer to change while mounted, so a run that may write takes its
// workspace for itself, from mount to commit. The kernel drops the lock
// if the holder dies.
type workspaceLock struct{ f *os.File }

func lockPath(stateDir, workspace string) string {
	sum := sha256.Sum256([]byte(workspace))
	return filepath.Join(stateDir, "locks", hex.EncodeToString(sum[:16])+".lock")
}

// lockWorkspace takes the lock, polling until timeout or ctx ends. Runs
// that cannot write the workspace share it (shared set). If another run
// holds it, beforeWait (if not nil) is called first, once, and its error
// ends the wait.
func lockWorkspace(ctx context.Context, stateDir, workspace string, timeout time.Duration, shared bool, beforeWait func() error) (*workspaceLock, error) {
	how := unix.LOCK_EX
	if shared {
		how = unix.LOCK_SH
	}
	p := lockPath(stateDir, workspace)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, err
	}
	// Not os.OpenFile, which offers the file to the netpoller first
	// (see internal/linux.ReadFile): a run takes this lock on its way.
	fd, err := linux.Open(p, unix.O_RDWR|unix.O_CREAT, 0o600)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return &workspaceLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, &os.PathError{Op: "flock", Path: p, Err: err}
		}
		if beforeWait != nil {
			if err := beforeWait(); err != nil {
				f.Close()
				return nil, err
			}
			beforeWait = nil
		}
		if !time.Now().Before(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w: %s (waited %v; --lock-timeout waits longer)", ErrWorkspaceBusy, workspace, timeout)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, context.Cause(ctx)
		case <-time.After(wait):
		}
		wait = min(wait*2, 50*time.Millisecond)
	}
}

func (l *workspaceLock) release() error {
	if l == nil {
		return nil
	}
	return l.f.Close() // closing the last fd drops the flock
}

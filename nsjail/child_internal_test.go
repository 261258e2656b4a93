package nsjail

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startChild starts argv as this process's child, waited for by child
// alone (not by exec.Cmd).
func startChild(t *testing.T, argv ...string) *child {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	require.NoError(t, cmd.Start())
	return &child{pid: cmd.Process.Pid}
}

func TestChildWaitReportsHowItEnded(t *testing.T) {
	c := startChild(t, "sh", "-c", "exit 7")
	s := c.wait()
	assert.True(t, s.status.Exited())
	assert.Equal(t, 7, s.status.ExitStatus())
	assert.Positive(t, s.rusage.Maxrss, "its resource usage comes with it")
}

// kill signals a child until it is reaped, never after: its pid may then
// be another process's.
func TestChildKillUntilReaped(t *testing.T) {
	c := startChild(t, "sleep", "60")
	c.kill()
	s := c.wait()
	assert.True(t, s.status.Signaled())
	assert.Equal(t, syscall.SIGKILL, s.status.Signal())
	assert.ErrorIs(t, c.kill(), os.ErrProcessDone, "reaped: kill sends nothing any more")
}

// A process wait cannot reap (not this process's child) has an unknown
// end, never a clean exit.
func TestChildWaitReportsWhatItCannotReap(t *testing.T) {
	c := &child{pid: os.Getppid()}
	s := c.wait()
	require.Error(t, s.err)
	assert.ErrorIs(t, s.err, syscall.ECHILD)
	assert.ErrorIs(t, c.kill(), os.ErrProcessDone, "its pid is not its own any more")
}

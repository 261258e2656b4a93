package nsjail

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"
)

// A sandbox error that the machine causes carries the remedy doctor
// gives for the same piece; the command's own failures carry none.
func TestWithRemedy(t *testing.T) {
	cases := []struct {
		se   StepError
		want string
	}{
		{StepError{Stage: "spawn", Errno: int(unix.EPERM)}, remedyUserNS},
		{StepError{Stage: "spawn", Errno: int(unix.ENOSPC)}, remedyUserNS},
		{StepError{Stage: "idmap", Errno: int(unix.EINVAL)}, remedyIdmap},
		{StepError{Stage: "workspace", Errno: int(unix.EINVAL)}, remedyOverlay},
		{StepError{Stage: "workspace", Errno: int(unix.ENOENT)}, ""},
		{StepError{Stage: "cgroup"}, remedyCgroups},
		{StepError{Stage: "seccomp"}, remedySeccomp},
		{StepError{Stage: "rootfs", Errno: int(unix.EACCES)}, remedyStateDir},
		{StepError{Stage: "exec", Errno: int(unix.ENOENT)}, ""},
		{StepError{Stage: "commit", Errno: int(unix.EXDEV)}, remedyMount},
		{StepError{Stage: "commit", Errno: int(unix.ENOSPC)}, ""},
	}
	for _, c := range cases {
		se := c.se
		assert.Equal(t, c.want, withRemedy(&se).Remedy, "%+v", c.se)
	}
}

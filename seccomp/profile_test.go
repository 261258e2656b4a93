package seccomp

import (
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestComplement32(t *testing.T) {
	rules := complement32(personalities)
	matches := func(x uint32) bool {
		for _, m := range rules {
			if uint64(x)&m.mask == m.value {
				return true
			}
		}
		return false
	}
	for _, a := range personalities {
		assert.False(t, matches(a), "allowed %#x must pass", a)
	}
	for _, bad := range []uint32{0x40000, 0x400000, 0x0040008, 0x80040000, 0xfffffffe, 1, 0x7fffffff} {
		assert.True(t, matches(bad), "%#x must be denied", bad)
	}
	r := rand.New(rand.NewSource(1))
	for range 100000 {
		x := r.Uint32()
		allowed := false
		for _, a := range personalities {
			allowed = allowed || a == x
		}
		require.Equal(t, !allowed, matches(x), "%#x", x)
	}
	assert.LessOrEqual(t, len(rules), 32*len(personalities))
}

func TestCompileDefaultProfiles(t *testing.T) {
	for _, sub := range []bool{true, false} {
		prog, err := Compile(DefaultProfile(sub))
		require.NoError(t, err)
		require.NotEmpty(t, prog.BPF)
		assert.Zero(t, len(prog.BPF)%8)
		assert.Less(t, len(prog.BPF)/8, 4096, "BPF_MAXINSNS")
		again, err := Compile(DefaultProfile(sub))
		require.NoError(t, err)
		assert.Same(t, prog, again, "compiled once per process")
	}
}

func TestCompileDefaultIsCompile(t *testing.T) {
	for _, sub := range []bool{true, false} {
		got, err := CompileDefault(sub)
		require.NoError(t, err)
		want, err := Compile(DefaultProfile(sub))
		require.NoError(t, err)
		assert.Equal(t, want.BPF, got.BPF)
	}
}

package overlay

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMountDataUUIDOffOnlyOnOneFS(t *testing.T) {
	one, err := MountData("/l", "/u", "/w", true)
	require.NoError(t, err)
	assert.Equal(t, "lowerdir=/l,upperdir=/u,workdir=/w,userxattr,redirect_dir=nofollow,metacopy=off,index=off,xino=off,uuid=off,volatile", one)
	two, err := MountData("/l", "/u", "/w", false)
	require.NoError(t, err)
	assert.NotContains(t, two, "uuid")
	_, err = MountData("/l,x", "/u", "/w", true)
	assert.Error(t, err)
}

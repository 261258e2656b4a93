package nsjail

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuildEnv(t *testing.T) {
	host := []string{"PATH=/usr/bin", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "GITHUB_TOKEN=ghp_x", "CI=true", "EDITOR=vi"}
	env, scrubbed, err := BuildEnv(host, EnvSpec{Set: []string{"FOO=bar=baz"}, Keep: []string{"CI"}}, "/tmp/home")
	require.NoError(t, err)
	assert.Equal(t, []string{"CI=true", "FOO=bar=baz", "HOME=/tmp/home", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/usr/bin"}, env)
	assert.Equal(t, []string{"EDITOR", "GITHUB_TOKEN", "HOME"}, scrubbed)
}

func TestBuildEnvSecrets(t *testing.T) {
	host := []string{"GITHUB_TOKEN=ghp_x"}
	_, _, err := BuildEnv(host, EnvSpec{Keep: []string{"GITHUB_TOKEN"}}, "/h")
	require.ErrorContains(t, err, "--allow-secret GITHUB_TOKEN")

	env, _, err := BuildEnv(host, EnvSpec{Keep: []string{"GITHUB_TOKEN"}, AllowSecret: []string{"GITHUB_TOKEN"}}, "/h")
	require.NoError(t, err)
	assert.Contains(t, env, "GITHUB_TOKEN=ghp_x")
	assert.Contains(t, env, "PATH="+DefaultPath)
}

func TestBuildEnvRejectsMalformed(t *testing.T) {
	_, _, err := BuildEnv(nil, EnvSpec{Set: []string{"NOEQUALS"}}, "/h")
	require.Error(t, err)
	_, _, err = BuildEnv(nil, EnvSpec{Keep: []string{"A=B"}}, "/h")
	require.Error(t, err)
}

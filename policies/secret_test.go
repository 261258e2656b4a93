package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLooksSecret(t *testing.T) {
	for _, name := range []string{"GITHUB_TOKEN", "AWS_ACCESS_KEY_ID", "db_password", "MY_SECRET", "OPENAI_API_KEY", "SSH_AUTH_SOCK", "DEPLOY_KEY", "GOOGLE_APPLICATION_CREDENTIALS"} {
		assert.True(t, LooksSecret(name), name)
	}
	for _, name := range []string{"PATH", "HOME", "GOPATH", "KEYBOARD", "LANG", "CI"} {
		assert.False(t, LooksSecret(name), name)
	}
}

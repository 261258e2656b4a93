package policies

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
)

// validName and validEnvName, hand-written so that a run compiles no
// regexp, accept what these patterns do.
func TestNamesAsThePatternsSay(t *testing.T) {
	name := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	env := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	for _, s := range []string{
		"", "a", "Z", "0", "_", ".", "-", "a.b-c_d", "9lives", ".hidden", "-x", "_x", "x_",
		"a b", "a/b", "é", "PATH", "HOME_2", "2PATH", "a\x00", "a\n", "ab.", "A-", "x=y",
	} {
		assert.Equal(t, name.MatchString(s), validName(s), "name %q", s)
		assert.Equal(t, env.MatchString(s), validEnvName(s), "env %q", s)
	}
}

package policies

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuiltinsParse(t *testing.T) {
	names := BuiltinNames()
	assert.Equal(t, []string{"ci", "default", "network", "readonly", "strict"}, names)
	for _, n := range names {
		p, err := Builtin(n)
		require.NoError(t, err, n)
		assert.Equal(t, n, p.Name)
	}
	def, _ := Builtin("default")
	assert.True(t, def.Has(FSWrite) && def.Has(Subprocess) && !def.Has(Network))
	ro, _ := Builtin("readonly")
	assert.False(t, ro.Has(FSWrite))
	strict, _ := Builtin("strict")
	assert.False(t, strict.Has(FSWrite) || strict.Has(Subprocess) || strict.Has(Network))
	assert.NotNil(t, strict.Limits)
	net, _ := Builtin("network")
	assert.True(t, net.Has(Network) && net.Has(FSWrite))
	ci, _ := Builtin("ci")
	assert.True(t, ci.Has(Network))
	_, err := Builtin("nope")
	assert.ErrorContains(t, err, "have ci, default")
}

func TestAllowDenyAndHash(t *testing.T) {
	p, _ := Builtin("readonly")
	h := p.Hash()
	q := p.Clone()
	q.Allow(Network)
	q.Allow(FSWrite)
	assert.Equal(t, []Capability{FSWrite, Subprocess, Network}, q.Capabilities)
	assert.NotEqual(t, h, q.Hash())
	q.Deny(Network)
	q.Deny(FSWrite)
	assert.Equal(t, h, q.Hash(), "same content, same hash")
	assert.Equal(t, h, p.Hash(), "Clone is deep")
}

// A built-in policy's hash comes from a table while it is unchanged; any
// change, even one that leaves its name, gets the hash of its content.
func TestHashOfChangedBuiltins(t *testing.T) {
	for _, name := range BuiltinNames() {
		p, _ := Builtin(name)
		assert.Equal(t, hashJSON(p), p.Hash(), name)
		for _, change := range []func(*Policy){
			func(p *Policy) { p.Allow(Network); p.Deny(Subprocess) },
			func(p *Policy) { p.Timeout = "1s" },
			func(p *Policy) { p.Env = append(p.Env, "EXTRA") },
			func(p *Policy) { p.ProtectedPaths = append(p.ProtectedPaths, "x") },
			func(p *Policy) { p.Description += "." },
		} {
			q, _ := Builtin(name)
			change(q)
			assert.Equal(t, hashJSON(q), q.Hash(), name)
			assert.NotEqual(t, p.Hash(), q.Hash(), name)
		}
	}
}

var invalidCases = []struct {
	name, doc string
	want      []string // "path: message fragment"
}{
	{"not json", `{"name": `, []string{": not valid JSON"}},
	{"trailing data", `{"name":"a","capabilities":[]} {}`, []string{": trailing data"}},
	{"unknown fields everywhere", `{"name":"a","capabilities":[],"color":"red","limits":{"memory":{"limit":1,"bogus":2}},"binds":{"read_only":[],"rw":[]}}`,
		[]string{"color: unknown field", "limits.memory.bogus: unknown field", "binds.rw: unknown field"}},
	{"bad name", `{"name":"a b","capabilities":[]}`, []string{"name: want letters"}},
	{"unknown capability", `{"name":"a","capabilities":["fs-write","teleport","fs-write"]}`,
		[]string{"capabilities[1]: unknown capability", "capabilities[2]: \"fs-write\" listed twice"}},
	{"negative limits", `{"name":"a","capabilities":[],"limits":{"memory":{"limit":-1},"cpu":{"quota":-5},"pids":{"limit":0}}}`,
		[]string{"limits.memory.limit: must be positive", "limits.cpu.quota: must be positive", "limits.pids.limit: must be positive"}},
	{"unsupported limits", `{"name":"a","capabilities":[],"limits":{"blockIO":{},"memory":{"limit":5,"swap":5}}}`,
		[]string{"limits.blockIO: not supported", "limits.memory: only limit"}},
	{"wrong type", `{"name":"a","capabilities":"fs-write"}`, []string{"capabilities: want []policies.Capability"}},
	{"bad timeout", `{"name":"a","capabilities":[],"timeout":"soon"}`, []string{"timeout: want a duration"}},
	{"unknown syscall", `{"name":"a","capabilities":[],"seccomp":{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["getpid","frobnicate"],"action":"SCMP_ACT_ERRNO"}]}}`,
		[]string{"seccomp.syscalls[0].names[1]: unknown system call \"frobnicate\""}},
	{"bad seccomp action", `{"name":"a","capabilities":[],"seccomp":{"defaultAction":"SCMP_ACT_EXPLODE"}}`, []string{"seccomp: defaultAction"}},
	{"bind escapes", `{"name":"a","capabilities":[],"binds":{"read_only":["/usr/../etc","relative","/","/lib","/no/such/dir","/etc/passwd","/proc/1"],"read_write":["/proc"]}}`,
		[]string{"binds.read_only[0]: \"/usr/../etc\" is not a clean path", "binds.read_only[1]: \"relative\" is not an absolute", "binds.read_only[2]: binding / would", "binds.read_only[3]: \"/lib\" goes through a symlink", "binds.read_only[4]: \"/no/such/dir\" does not exist", "binds.read_only[5]: \"/etc/passwd\" is not a directory", "binds.read_only[6]: \"/proc/1\" is under /proc", "binds.read_write[0]: \"/proc\" is under /proc"}},
	{"secret env", `{"name":"a","capabilities":[],"env":["GITHUB_TOKEN","1BAD"]}`, []string{"env[0]: GITHUB_TOKEN looks like a secret", "env[1]: not a variable name"}},
	{"bad globs", `{"name":"a","capabilities":[],"protected_paths":["/abs","a/../b","x/[","ok/**"]}`,
		[]string{"protected_paths[0]: \"/abs\"", "protected_paths[1]: \"a/../b\"", "protected_paths[2]: \"x/[\""}},
}

func TestParseReportsEveryProblem(t *testing.T) {
	for _, c := range invalidCases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrInvalid))
			var ie *InvalidError
			require.ErrorAs(t, err, &ie)
			var got []string
			for _, p := range ie.Problems {
				got = append(got, p.Path+": "+p.Message)
			}
			require.Len(t, got, len(c.want), "%q", got)
			for _, w := range c.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				assert.True(t, found, "want %q in %q", w, got)
			}
		})
	}
}

func TestMatchPath(t *testing.T) {
	cases := []struct {
		glob, path string
		want       bool
	}{
		{".git/hooks/**", ".git/hooks", true},
		{".git/hooks/**", ".git/hooks/pre-commit", true},
		{".git/hooks/**", ".git/hooks/a/b", true},
		{".git/hooks/**", ".git/hooksx", false},
		{".git/config", ".git/config", true},
		{".git/config", ".git/config.bak", false},
		{"**/*.pem", "a/b/key.pem", true},
		{"**/*.pem", "key.pem", true},
		{"*.pem", "a/key.pem", false},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, MatchPath(c.glob, c.path), "%s ~ %s", c.glob, c.path)
	}
}

// checkParse is the body shared by the fuzz target and the corpus test:
// Parse never panics, and a policy it accepts round-trips to itself.
func checkParse(t *testing.T, doc []byte) {
	p, err := Parse(doc)
	if err != nil {
		var ie *InvalidError
		if !errors.As(err, &ie) || len(ie.Problems) == 0 {
			t.Fatalf("error without problems: %v", err)
		}
		return
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(b)
	if err != nil {
		t.Fatalf("accepted policy does not re-parse: %v", err)
	}
	if again.Hash() != p.Hash() {
		t.Fatalf("round trip changed the policy")
	}
}

func seedDocs() [][]byte {
	var docs [][]byte
	for _, n := range BuiltinNames() {
		b, _ := builtinFS.ReadFile("builtin/" + n + ".json")
		docs = append(docs, b)
	}
	for _, c := range invalidCases {
		docs = append(docs, []byte(c.doc))
	}
	return docs
}

func TestParseCorpus(t *testing.T) {
	for _, d := range seedDocs() {
		checkParse(t, d)
	}
}

func FuzzParse(f *testing.F) {
	for _, d := range seedDocs() {
		f.Add(d)
	}
	f.Fuzz(checkParse)
}

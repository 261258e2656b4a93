// Package policies defines what a run may do, as JSON documents: the
// built-in policies embedded from builtin/*.json and users' own files.
//
// A policy names capabilities (fs-write, subprocess, network), limits in
// the shape of the OCI runtime spec's LinuxResources, a timeout, an extra
// seccomp profile (OCI LinuxSeccomp, stacked on top of neonbox-ns's own
// filter, so it can only restrict further), extra binds, environment
// variables to pass through and paths the run must not change.
package policies

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Capability is a power a policy grants.
type Capability string

// The capabilities.
const (
	// FSWrite: the workspace is writable through overlayfs; without it
	// the workspace is bound read-only.
	FSWrite Capability = "fs-write"
	// Subprocess: the command may start other processes; without it
	// seccomp denies fork, vfork and clone without CLONE_THREAD.
	Subprocess Capability = "subprocess"
	// Network: the jail shares the host's network; without it it has
	// its own network namespace with only lo.
	Network Capability = "network"
)

// Capabilities lists every capability, in order.
var Capabilities = []Capability{FSWrite, Subprocess, Network}

// Binds are host directories made visible in the jail at the same path
// (none under /proc, which is the jail's own).
type Binds struct {
	ReadOnly  []string `json:"read_only,omitempty"`
	ReadWrite []string `json:"read_write,omitempty"`
}

// Policy is one policy document.
type Policy struct {
	Name           string                `json:"name"`
	Description    string                `json:"description,omitempty"`
	Capabilities   []Capability          `json:"capabilities"`
	Limits         *specs.LinuxResources `json:"limits,omitempty"`
	Timeout        string                `json:"timeout,omitempty"`
	Seccomp        *specs.LinuxSeccomp   `json:"seccomp,omitempty"`
	Binds          *Binds                `json:"binds,omitempty"`
	Env            []string              `json:"env,omitempty"`
	ProtectedPaths []string              `json:"protected_paths,omitempty"`
}

// Has reports whether p grants c.
func (p *Policy) Has(c Capability) bool {
	for _, have := range p.Capabilities {
		if have == c {
			return true
		}
	}
	return false
}

// Allow grants c; Deny takes it away.
func (p *Policy) Allow(c Capability) {
	if !p.Has(c) {
		p.Capabilities = append(p.Capabilities, c)
		p.sortCaps()
	}
}

// Deny takes c away.
func (p *Policy) Deny(c Capability) {
	out := p.Capabilities[:0]
	for _, have := range p.Capabilities {
		if have != c {
			out = append(out, have)
		}
	}
	p.Capabilities = out
}

func (p *Policy) sortCaps() {
	order := map[Capability]int{}
	for i, c := range Capabilities {
		order[c] = i
	}
	sort.SliceStable(p.Capabilities, func(i, j int) bool { return order[p.Capabilities[i]] < order[p.Capabilities[j]] })
}

// Hash identifies the policy's effective content: the receipt records it
// so a run can be matched to exactly what it was allowed. It is the
// SHA-256 of the policy's JSON encoding; for a built-in policy as it is
// built in, it comes from a table (builtin_literals.go) rather than from
// an encoding, whose first use in a process costs encoding/json's
// reflection over the policy's types (0.4-0.8 ms).
func (p *Policy) Hash() string {
	if h, ok := builtinHashes[p.Name]; ok && reflect.DeepEqual(p, builtinLiteral(p.Name)) {
		return h
	}
	return hashJSON(p)
}

func hashJSON(p *Policy) string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return fmt.Sprintf("sha256:%x", sum[:])
}

// Clone returns a deep copy of p.
func (p *Policy) Clone() *Policy {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // a Policy always marshals
	}
	var c Policy
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return &c
}

//go:embed builtin/*.json
var builtinFS embed.FS

// Builtin returns the built-in policy name. The documents in builtin/
// are compiled into Go values (builtin_literals.go, go generate), so a
// run spends no time decoding them: cold, the decoding took as long as
// half the jail's setup.
func Builtin(name string) (*Policy, error) {
	if p := builtinLiteral(name); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("no built-in policy %q (have %s)", name, strings.Join(BuiltinNames(), ", "))
}

// BuiltinNames lists the built-in policies.
func BuiltinNames() []string {
	entries, _ := builtinFS.ReadDir("builtin")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	sort.Strings(names)
	return names
}

// Load resolves a --policy argument: a built-in name, or a path to a
// policy file (anything with a slash or a .json suffix).
func Load(nameOrPath string) (*Policy, error) {
	if !strings.Contains(nameOrPath, "/") && !strings.HasSuffix(nameOrPath, ".json") {
		return Builtin(nameOrPath)
	}
	b, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, err
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", nameOrPath, err)
	}
	return p, nil
}

// Problem is one thing wrong with a policy document, at a JSON path such
// as "limits.memory.limit" or "seccomp.syscalls[2].names[0]".
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// InvalidError carries every problem found in a policy.
type InvalidError struct{ Problems []Problem }

func (e *InvalidError) Error() string {
	var s []string
	for _, p := range e.Problems {
		s = append(s, p.String())
	}
	return "invalid policy: " + strings.Join(s, "; ")
}

// ErrInvalid matches any *InvalidError with errors.Is.
var ErrInvalid = errors.New("invalid policy")

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Parse decodes and validates a policy document. Unknown fields are
// errors, not ignored; the error lists every problem found.
func Parse(b []byte) (*Policy, error) {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, &InvalidError{Problems: []Problem{{Message: "not valid JSON: " + err.Error()}}}
	}
	if dec.More() {
		return nil, &InvalidError{Problems: []Problem{{Message: "trailing data after the policy object"}}}
	}
	problems := unknownFields(raw)
	var p Policy
	if err := json.Unmarshal(b, &p); err != nil {
		problems = append(problems, typeProblem(err))
		return nil, &InvalidError{Problems: problems}
	}
	problems = append(problems, p.Validate()...)
	if len(problems) > 0 {
		return nil, &InvalidError{Problems: problems}
	}
	return &p, nil
}

func typeProblem(err error) Problem {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return Problem{Path: te.Field, Message: fmt.Sprintf("want %s, got %s", te.Type, te.Value)}
	}
	return Problem{Message: err.Error()}
}

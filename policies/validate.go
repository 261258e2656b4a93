package policies

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/neonbox/neonbox-ns/seccomp"
)

// validName reports whether s is a policy name: a letter or digit, then
// letters, digits, '.', '_' and '-'. (Checked on every run: no regexp to
// compile on the way.)
func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return s != ""
}

// validEnvName reports whether s is an environment variable's name: a
// letter or '_', then letters, digits and '_'.
func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

// Validate checks p's values; it returns every problem found.
func (p *Policy) Validate() []Problem {
	var out []Problem
	bad := func(path, format string, a ...any) {
		out = append(out, Problem{Path: path, Message: fmt.Sprintf(format, a...)})
	}
	if !validName(p.Name) {
		bad("name", "want letters, digits, '.', '_' or '-', got %q", p.Name)
	}
	seen := map[Capability]bool{}
	for i, c := range p.Capabilities {
		if !known(c) {
			bad(fmt.Sprintf("capabilities[%d]", i), "unknown capability %q (want fs-write, subprocess or network)", c)
		}
		if seen[c] {
			bad(fmt.Sprintf("capabilities[%d]", i), "%q listed twice", c)
		}
		seen[c] = true
	}
	if p.Timeout != "" {
		if d, err := time.ParseDuration(p.Timeout); err != nil || d < 0 {
			bad("timeout", "want a duration such as 30s or 10m, got %q", p.Timeout)
		}
	}
	out = append(out, validateLimits(p.Limits)...)
	out = append(out, validateSeccomp(p.Seccomp)...)
	if p.Binds != nil {
		for i, b := range p.Binds.ReadOnly {
			if msg := checkBind(b); msg != "" {
				bad(fmt.Sprintf("binds.read_only[%d]", i), "%s", msg)
			}
		}
		for i, b := range p.Binds.ReadWrite {
			if msg := checkBind(b); msg != "" {
				bad(fmt.Sprintf("binds.read_write[%d]", i), "%s", msg)
			}
		}
	}
	for i, e := range p.Env {
		switch {
		case !validEnvName(e):
			bad(fmt.Sprintf("env[%d]", i), "not a variable name: %q", e)
		case LooksSecret(e):
			bad(fmt.Sprintf("env[%d]", i), "%s looks like a secret; pass it with --keep-env %s --allow-secret %s instead", e, e, e)
		}
	}
	for i, g := range p.ProtectedPaths {
		if err := checkGlob(g); err != nil {
			bad(fmt.Sprintf("protected_paths[%d]", i), "%v", err)
		}
	}
	return out
}

func known(c Capability) bool {
	for _, k := range Capabilities {
		if k == c {
			return true
		}
	}
	return false
}

func validateLimits(r *specs.LinuxResources) []Problem {
	if r == nil {
		return nil
	}
	var out []Problem
	bad := func(path, msg string) { out = append(out, Problem{Path: "limits." + path, Message: msg}) }
	unsupported := map[string]bool{
		"devices": len(r.Devices) > 0, "blockIO": r.BlockIO != nil, "hugepageLimits": len(r.HugepageLimits) > 0,
		"network": r.Network != nil, "rdma": len(r.Rdma) > 0, "unified": len(r.Unified) > 0,
	}
	for k, set := range unsupported {
		if set {
			bad(k, "not supported (memory, cpu and pids are)")
		}
	}
	if m := r.Memory; m != nil {
		if m.Limit == nil {
			bad("memory", "want a limit")
		} else if *m.Limit <= 0 {
			bad("memory.limit", fmt.Sprintf("must be positive, got %d", *m.Limit))
		}
		if m.Reservation != nil || m.Swap != nil || m.Kernel != nil || m.KernelTCP != nil || m.Swappiness != nil || m.DisableOOMKiller != nil || m.UseHierarchy != nil || m.CheckBeforeUpdate != nil {
			bad("memory", "only limit is supported")
		}
	}
	if c := r.CPU; c != nil {
		if c.Quota == nil {
			bad("cpu", "want a quota (and optionally a period)")
		} else if *c.Quota <= 0 {
			bad("cpu.quota", fmt.Sprintf("must be positive, got %d", *c.Quota))
		}
		if c.Period != nil && (*c.Period < 1000 || *c.Period > 1000000) {
			bad("cpu.period", fmt.Sprintf("must be 1000 to 1000000 microseconds, got %d", *c.Period))
		}
		if c.Shares != nil || c.Burst != nil || c.RealtimeRuntime != nil || c.RealtimePeriod != nil || c.Cpus != "" || c.Mems != "" || c.Idle != nil {
			bad("cpu", "only quota and period are supported")
		}
	}
	if p := r.Pids; p != nil {
		if p.Limit == nil {
			bad("pids", "want a limit")
		} else if *p.Limit <= 0 {
			bad("pids.limit", fmt.Sprintf("must be positive, got %d", *p.Limit))
		}
	}
	return out
}

func validateSeccomp(s *specs.LinuxSeccomp) []Problem {
	if s == nil {
		return nil
	}
	var out []Problem
	for i, sc := range s.Syscalls {
		if len(sc.Names) == 0 {
			out = append(out, Problem{Path: fmt.Sprintf("seccomp.syscalls[%d].names", i), Message: "empty"})
		}
		for j, n := range sc.Names {
			if !seccomp.Known(n) {
				out = append(out, Problem{Path: fmt.Sprintf("seccomp.syscalls[%d].names[%d]", i, j), Message: fmt.Sprintf("unknown system call %q", n)})
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	if _, err := seccomp.Compile(s); err != nil {
		out = append(out, Problem{Path: "seccomp", Message: err.Error()})
	}
	return out
}

// checkBind returns why host directory p cannot be bound, or "".
func checkBind(p string) string {
	switch {
	case !filepath.IsAbs(p):
		return fmt.Sprintf("%q is not an absolute path", p)
	case filepath.Clean(p) != p || strings.Contains(p, "/../") || strings.HasSuffix(p, "/.."):
		return fmt.Sprintf("%q is not a clean path (no .., no trailing /)", p)
	case p == "/":
		return "binding / would show the whole host"
	case p == "/proc" || strings.HasPrefix(p, "/proc/"):
		return fmt.Sprintf("%q is under /proc, which is the jail's own", p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Sprintf("%q does not exist", p)
	}
	if real != p {
		return fmt.Sprintf("%q goes through a symlink (to %s); name the real path", p, real)
	}
	if st, err := os.Stat(p); err != nil || !st.IsDir() {
		return fmt.Sprintf("%q is not a directory", p)
	}
	return ""
}

// checkGlob validates a protected-path pattern: slash-separated, relative
// to the workspace, each element a path.Match pattern or "**".
func checkGlob(g string) error {
	if g == "" || strings.HasPrefix(g, "/") {
		return fmt.Errorf("%q: want a pattern relative to the workspace", g)
	}
	for _, seg := range strings.Split(g, "/") {
		if seg == ".." || seg == "." || seg == "" {
			return fmt.Errorf("%q: no empty, . or .. elements", g)
		}
		if seg == "**" {
			continue
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("%q: %v", g, err)
		}
	}
	return nil
}

// ValidGlob reports whether g is a valid protected-path pattern.
func ValidGlob(g string) bool { return checkGlob(g) == nil }

// MatchPath reports whether the workspace-relative path rel matches the
// protected-path pattern g. "**" matches any number of elements, so
// ".git/hooks/**" matches everything below .git/hooks and the directory
// itself.
func MatchPath(g, rel string) bool {
	return matchSegs(strings.Split(g, "/"), strings.Split(rel, "/"))
}

func matchSegs(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// unknownFields walks a decoded JSON document against the Policy type and
// reports every key the type does not have.
func unknownFields(raw any) []Problem {
	var out []Problem
	walkUnknown(raw, reflect.TypeOf(Policy{}), "", &out)
	return out
}

func walkUnknown(v any, t reflect.Type, at string, out *[]Problem) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	join := func(k string) string {
		if at == "" {
			return k
		}
		return at + "." + k
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return // a type error, reported by the typed decode
		}
		fields := jsonFields(t)
		for k, sub := range obj {
			ft, ok := fields[k]
			if !ok {
				*out = append(*out, Problem{Path: join(k), Message: "unknown field"})
				continue
			}
			walkUnknown(sub, ft, join(k), out)
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return
		}
		for i, sub := range arr {
			walkUnknown(sub, t.Elem(), fmt.Sprintf("%s[%d]", at, i), out)
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, sub := range obj {
			walkUnknown(sub, t.Elem(), join(k), out)
		}
	}
}

func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

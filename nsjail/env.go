package nsjail

import (
	"fmt"
	"sort"
	"strings"

	"github.com/neonbox/neonbox-ns/policies"
)

// DefaultPath is the jail's PATH when the host has none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// envAllowed reports whether a host variable passes into the jail without
// being asked for.
func envAllowed(name string) bool {
	switch name {
	case "PATH", "LANG", "TERM", "TZ":
		return true
	}
	return strings.HasPrefix(name, "LC_")
}

// EnvSpec says which variables the jail gets.
type EnvSpec struct {
	// Set are KEY=VALUE pairs given explicitly (--env).
	Set []string
	// Keep names host variables to pass through (--keep-env).
	Keep []string
	// AllowSecret names variables that may be kept although they look
	// like secrets (--allow-secret).
	AllowSecret []string
	// Policy names variables a policy passes through; they were checked
	// when the policy was validated.
	Policy []string
}

// BuildEnv computes the jail's environment from the host's and spec, with
// home as HOME. It returns the environment and the sorted names of host
// variables left out. Keeping a variable that looks secret without
// allowing it is an error.
func BuildEnv(host []string, spec EnvSpec, home string) (env, scrubbed []string, err error) {
	hostVals := map[string]string{}
	var order []string
	for _, kv := range host {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := hostVals[k]; !dup {
			order = append(order, k)
		}
		hostVals[k] = v
	}
	allowSecret := map[string]bool{}
	for _, n := range spec.AllowSecret {
		allowSecret[n] = true
	}
	keep := map[string]bool{}
	for _, n := range spec.Keep {
		if n == "" || strings.Contains(n, "=") {
			return nil, nil, fmt.Errorf("--keep-env %q: not a variable name", n)
		}
		if policies.LooksSecret(n) && !allowSecret[n] {
			return nil, nil, fmt.Errorf("--keep-env %s: the name looks like a secret; add --allow-secret %s to pass it anyway", n, n)
		}
		keep[n] = true
	}
	for _, n := range spec.Policy {
		keep[n] = true
	}
	vals := map[string]string{}
	for _, k := range order {
		if envAllowed(k) || keep[k] {
			vals[k] = hostVals[k]
		} else {
			scrubbed = append(scrubbed, k)
		}
	}
	if _, ok := vals["PATH"]; !ok {
		vals["PATH"] = DefaultPath
	}
	vals["HOME"] = home
	for _, kv := range spec.Set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(k, 0) || strings.ContainsRune(v, 0) {
			return nil, nil, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		vals[k] = v
	}
	for k, v := range vals {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	sort.Strings(scrubbed)
	return env, scrubbed, nil
}

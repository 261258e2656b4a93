// Package testutil holds helpers shared by the privileged tests.
//
// Tests that need a kernel capability probe for it and skip with the reason
// when it is missing. With NEONBOX_REQUIRE_PRIVILEGED=1 in the environment
// (CI sets it) such a skip becomes a failure, so a CI run cannot pass by
// skipping the tests that matter.
package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// StrictEnv is the environment variable that turns capability skips into
// failures.
const StrictEnv = "NEONBOX_REQUIRE_PRIVILEGED"

// Skip skips t with reason, or fails it when StrictEnv is set.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(StrictEnv) == "1" {
		t.Fatalf("required capability missing (%s=1): %s", StrictEnv, reason)
	}
	t.Skip(reason)
}

// RequireRoot skips t unless the test runs as host root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root")
	}
}

// RequireUserNS skips t unless a user namespace (with mount, pid and net
// namespaces inside it) can be created.
func RequireUserNS(t testing.TB) {
	t.Helper()
	out, err := exec.Command("unshare", "-Urmpnf", "true").CombinedOutput()
	if err != nil {
		Skip(t, "cannot create user namespaces: "+err.Error()+": "+string(out))
	}
}

package main

import (
	"os"
	"testing"

	"github.com/neonbox/neonbox-ns/reexec"
)

func TestMain(m *testing.M) {
	// The jails' init is this test binary re-executed (its C part);
	// nsjail's other helpers go through reexec.
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

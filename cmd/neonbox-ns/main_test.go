package main

import (
	"os"
	"testing"

	"github.com/neonbox/neonbox-ns/reexec"
)

func TestMain(m *testing.M) {
	// The jail's init is this test binary re-executed.
	if reexec.Init() {
		return
	}
	os.Exit(m.Run())
}

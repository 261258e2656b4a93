// Package integration tests the built neonbox-ns binary end to end: it
// builds cmd/neonbox-ns once and drives it as a user or CI job would.
package integration

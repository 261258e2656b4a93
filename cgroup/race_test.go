//go:build race

package cgroup

// raceEnabled is true when the tests run with the race detector, whose
// shadow memory inflates the memory a helper process uses.
const raceEnabled = true

//go:build !race

package main

// raceEnabled says the test binary (and so every node TestCluster
// starts) runs with the race detector, which slows it several times.
const raceEnabled = false

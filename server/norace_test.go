//go:build !race

package server

// raceEnabled is true under the race detector, which makes the heaviest
// tests take ten times longer: they do less.
const raceEnabled = false

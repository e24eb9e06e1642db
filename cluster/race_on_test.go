//go:build race

package cluster

// raceEnabled is true when the race detector is on; it slows memberlist
// enough that 50 in-process nodes are no longer a meaningful measurement.
const raceEnabled = true

//go:build !race

package e2e

// raceEnabled builds the gateway with -race when the tests run with -race.
const raceEnabled = false

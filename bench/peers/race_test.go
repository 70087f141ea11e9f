//go:build race

package peers

const raceEnabled = true

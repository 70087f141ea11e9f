//go:build !race

package peers

const raceEnabled = false

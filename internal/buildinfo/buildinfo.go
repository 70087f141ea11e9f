// Package buildinfo says which build a kahuna binary is, for --version.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Version is what a binary's --version prints: its name, the module
// version and the VCS revision it was built from, as the go command
// recorded them.
func Version(name string) string {
	bi, _ := debug.ReadBuildInfo()
	return name + " " + Describe(bi)
}

// Describe says "VERSION [revision REV[ (modified)]] GOVERSION"; VERSION
// is "(devel)" when the build has none (go build in a checkout), and the
// revision is left out when the go command recorded none (a build without
// -buildvcs, or outside a repository).
func Describe(bi *debug.BuildInfo) string {
	if bi == nil {
		return "(devel)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	parts := []string{v}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		r := "revision " + rev
		if modified == "true" {
			r += " (modified)"
		}
		parts = append(parts, r)
	}
	if bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	return strings.Join(parts, " ")
}

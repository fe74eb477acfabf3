package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionHead = `usage: ratewarden version

Prints the module version, the VCS revision it was built from (and whether
the tree had uncommitted changes), the commit time and the Go version, as
recorded in the binary. "ratewarden --version" does the same.
`

func versionCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", versionHead, "  0  printed\n  2  usage error\n")
	pos, code, done := parseCommand(fs, args, stdout, stderr)
	if done {
		return code
	}
	if len(pos) > 0 {
		return usageError(stderr, "version", "unexpected arguments %q", pos)
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionText(info, ok, runtime.GOOS+"/"+runtime.GOARCH))
	return exitOK
}

// versionText is the output of "ratewarden version" for the build
// information info (ok false: none). A binary built by "go run" or
// "go test", or outside a checkout, records no VCS information: it says
// so rather than guess.
func versionText(info *debug.BuildInfo, ok bool, platform string) string {
	version, goVersion := "(devel)", runtime.Version()
	settings := map[string]string{}
	if ok {
		if v := info.Main.Version; v != "" {
			version = v
		}
		goVersion = info.GoVersion
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ratewarden %s\n", version)
	switch rev := settings["vcs.revision"]; {
	case !ok:
		b.WriteString("revision:  unknown (the binary carries no build information)\n")
	case rev == "":
		b.WriteString("revision:  unknown (no VCS information recorded: go run, go test, -buildvcs=false or a build outside a checkout)\n")
	case settings["vcs.modified"] == "true":
		fmt.Fprintf(&b, "revision:  %s (modified: built with uncommitted changes)\n", rev)
	default:
		fmt.Fprintf(&b, "revision:  %s (clean)\n", rev)
	}
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "committed: %s\n", t)
	}
	fmt.Fprintf(&b, "go:        %s %s\n", goVersion, platform)
	return b.String()
}

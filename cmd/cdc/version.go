package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3"; it
// wins over the module version of the build information.
var version = ""

// build is what the binary knows of its own build, from runtime/debug's
// build information: go build stamps the VCS settings when it builds in a
// checkout with -buildvcs=true or auto (the default, unless GOFLAGS says
// otherwise); go test and go run do not.
type build struct {
	version  string // -X main.version, else the main module's version, else (devel)
	revision string // vcs.revision, with "+dirty" when vcs.modified; "" when unknown
	time     string // vcs.time (the commit's), "" when unknown
}

func readBuild() build {
	b := build{version: version}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b.withDefaults()
	}
	if b.version == "" {
		b.version = bi.Main.Version
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.revision = s.Value
		case "vcs.time":
			b.time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if b.revision != "" && dirty {
		b.revision += "+dirty"
	}
	return b.withDefaults()
}

func (b build) withDefaults() build {
	if b.version == "" {
		b.version = "(devel)"
	}
	return b
}

// revisionLabel is the revision for walpost_build_info: "unknown" without
// VCS information.
func (b build) revisionLabel() string {
	if b.revision == "" {
		return "unknown"
	}
	return b.revision
}

// String is the version line's middle: `v1.2.3 (revision 0123abc…+dirty,
// 2026-01-02T03:04:05Z)`, or `(devel) (unknown revision)`.
func (b build) String() string {
	switch {
	case b.revision == "":
		return b.version + " (unknown revision)"
	case b.time == "":
		return fmt.Sprintf("%s (revision %s)", b.version, b.revision)
	}
	return fmt.Sprintf("%s (revision %s, %s)", b.version, b.revision, b.time)
}

// versionCmd is cdc version.
func versionCmd(o *options, stdout, stderr io.Writer) int {
	if len(o.args) > 0 {
		fmt.Fprintf(stderr, "cdc version: takes no arguments; got %s\n", quoteAll(o.args))
		return 2
	}
	fmt.Fprintf(stdout, "cdc (walpost) %s %s %s/%s\n", readBuild(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}

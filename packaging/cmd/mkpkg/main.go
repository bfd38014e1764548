// Command mkpkg builds the sosappliance .deb and .rpm packages into a
// directory (`make packages` runs it with -out dist). It needs only the Go
// toolchain and git: nfpm is linked in as a library.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/sosappliance/sosappliance/packaging"
)

func main() {
	var o packaging.Options
	var arches, formats string
	flag.StringVar(&o.RepoDir, "repo", ".", "root of the sosappliance checkout")
	flag.StringVar(&o.OutDir, "out", "dist", "directory the packages are written to")
	flag.StringVar(&o.Version, "version", "", "upstream version (default: derived from git describe)")
	flag.StringVar(&arches, "arch", "amd64,arm64", "comma-separated GOARCH values")
	flag.StringVar(&formats, "formats", "deb,rpm", "comma-separated package formats")
	flag.StringVar(&o.Maintainer, "maintainer", packaging.DefaultMaintainer, "package maintainer, \"Name <email>\"")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mkpkg: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	o.Arches = splitList(arches)
	o.Formats = splitList(formats)
	o.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	paths, err := packaging.Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkpkg:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

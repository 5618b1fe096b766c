// Command packaging builds ReclaimNet's release packages with nfpm
// (github.com/goreleaser/nfpm/v2), a Go module, so a release needs the Go
// toolchain and nothing else:
//
//	go run ./packaging deb [--version v0.2.0] [--out dist] [--binary PATH]
//
// The .deb holds the cgo build of reclaimnet (NVML included), the systemd
// unit, a default agent configuration, the README and docs, the licences
// of everything built into the binary, and a man page per command, which
// the packaged binary writes itself (manPages). docs/packaging.md describes the package and
// the unit; the files it installs are in files/.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: go run ./packaging deb [--version V] [--out DIR] [--binary PATH] [--maintainer "NAME <EMAIL>"]

Builds the reclaimnet .deb for this machine's architecture and prints its path.`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "deb" {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("deb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage); fs.PrintDefaults() }
	var opts debOptions
	fs.StringVar(&opts.Version, "version", "", "version to build in, e.g. v0.2.0 (default: the source's cli.Version)")
	fs.StringVar(&opts.OutDir, "out", "dist", "directory the package is written to")
	fs.StringVar(&opts.Binary, "binary", "", "package this reclaimnet binary (built with cgo, runnable here) instead of building one")
	fs.StringVar(&opts.Maintainer, "maintainer", defaultMaintainer, "the package's Maintainer field")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "packaging deb: unexpected argument %q\n%s\n", fs.Arg(0), usage)
		return 2
	}
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(stderr, "packaging:", err)
		return 1
	}
	opts.Root = root
	path, err := buildDeb(opts)
	if err != nil {
		fmt.Fprintln(stderr, "packaging deb:", err)
		return 1
	}
	fmt.Fprintln(stdout, path)
	return 0
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run it inside the reclaimnet module")
	}
	return filepath.Dir(mod), nil
}

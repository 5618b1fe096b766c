package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// embeddedData are third-party files built into the binary with
// go:embed, each with the licence file beside it.
var embeddedData = []struct{ name, licence string }{
	{"the Bamboo spot-preemption traces (sim/traces/bamboo_spot)", "sim/traces/bamboo_spot/LICENSE"},
}

// licences writes the package's copyright file: the licence of every
// piece of third-party code and data in the binary, which their licences
// require a binary distribution to carry. The modules are the ones the
// binary itself lists (its build information), so the file matches what
// was linked, not what go.mod mentions.
func licences(root, bin string, meta binaryMeta) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `This package holds %s, ReclaimNet %s built with %s.

Built into the binary are the Go standard library and runtime, the Go
modules that 'go version -m %s' lists, and data files
embedded in it. The licence of each follows.
`, binPath, meta.version, meta.info.GoVersion, binPath)

	// The project's own licence, when the repository has one.
	if own := licenceFiles(root); len(own) > 0 {
		if err := section(&b, "ReclaimNet", root, own); err != nil {
			return nil, err
		}
	}
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOROOT: %w", err)
	}
	dir := strings.TrimSpace(string(goroot))
	std := licenceFiles(dir)
	if len(std) == 0 {
		return nil, fmt.Errorf("no licence file in GOROOT %s", dir)
	}
	if err := section(&b, "Go "+meta.info.GoVersion+" (standard library and runtime)", dir, std); err != nil {
		return nil, err
	}

	dirs, err := moduleDirs(root, meta)
	if err != nil {
		return nil, err
	}
	mods := make([]string, 0, len(dirs))
	for m := range dirs {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		found := licenceFiles(dirs[m])
		if len(found) == 0 {
			return nil, fmt.Errorf("module %s (%s) has no licence file at its root", m, dirs[m])
		}
		if err := section(&b, m, dirs[m], found); err != nil {
			return nil, err
		}
	}
	for _, e := range embeddedData {
		path := filepath.Join(root, e.licence)
		if err := section(&b, e.name, filepath.Dir(path), []string{filepath.Base(path)}); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// section appends one component's licence files under a heading.
func section(b *bytes.Buffer, name, dir string, names []string) error {
	for _, n := range names {
		text, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "\n%s\n%s: %s\n\n", strings.Repeat("-", 72), name, n)
		b.Write(bytes.TrimRight(text, "\n"))
		b.WriteString("\n")
	}
	return nil
}

// licenceFiles names the licence and notice files at the top of dir.
func licenceFiles(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		up := strings.ToUpper(e.Name())
		if !e.Type().IsRegular() {
			continue
		}
		for _, p := range []string{"LICENSE", "LICENCE", "COPYING", "NOTICE", "UNLICENSE"} {
			if strings.HasPrefix(up, p) {
				out = append(out, e.Name())
				break
			}
		}
	}
	return out
}

// moduleDirs maps "path version" of every module in the binary to its
// directory in the module cache (downloading any that is missing).
func moduleDirs(root string, meta binaryMeta) (map[string]string, error) {
	args := []string{"mod", "download", "-json"}
	for _, d := range meta.info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		if m.Version == "" {
			return nil, fmt.Errorf("module %s is replaced by a local directory: its licence cannot be traced", d.Path)
		}
		args = append(args, m.Path+"@"+m.Version)
	}
	if len(args) == 3 {
		return nil, errors.New("the binary lists no modules: not a module build")
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download: %w\n%s%s", err, out, stderr.Bytes())
	}
	dirs := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct{ Path, Version, Dir, Error string }
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go mod download: %w", err)
		}
		if m.Error != "" || m.Dir == "" {
			return nil, fmt.Errorf("go mod download %s@%s: %s", m.Path, m.Version, m.Error)
		}
		dirs[m.Path+" "+m.Version] = m.Dir
	}
	return dirs, nil
}

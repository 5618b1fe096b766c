package main

import (
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"debug/elf"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
)

// The files the package installs as they are.
//
//go:embed files
var packageFiles embed.FS

// Where the package puts things.
const (
	binPath    = "/usr/bin/reclaimnet"
	unitPath   = "/usr/lib/systemd/system/reclaimnet.service"
	configPath = "/etc/reclaimnet/agent.json"
	docDir     = "/usr/share/doc/reclaimnet"
	manDir     = "/usr/share/man/man1"
)

// defaultMaintainer fills the control file's required Maintainer field
// when the release names nobody (.invalid: it reaches no one).
const defaultMaintainer = "ReclaimNet maintainers <maintainers@reclaimnet.invalid>"

// manPages has the packaged binary write its own man pages (section 1,
// one file per command, named like reclaimnet-agent.1) into dir with its
// hidden 'reclaimnet man DIR': the pages come from the same command
// definitions as its help, of the very version the package holds.
func manPages(bin, dir string) error {
	if out, err := exec.Command(bin, "man", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("%s man %s: %w: %s", bin, dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// debOptions says what to package.
type debOptions struct {
	Root       string // the module's root directory
	Version    string // build with this cli.Version ("": the source's own)
	Binary     string // package this binary instead of building one
	OutDir     string
	Maintainer string
}

// buildDeb builds the .deb into opts.OutDir and returns its path.
func buildDeb(opts debOptions) (string, error) {
	stage, err := os.MkdirTemp("", "reclaimnet-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	bin := opts.Binary
	if bin == "" {
		bin = filepath.Join(stage, "reclaimnet")
		if err := goBuild(opts.Root, bin, opts.Version); err != nil {
			return "", err
		}
	} else if opts.Version != "" {
		return "", errors.New("--version builds the binary: it does not apply to --binary")
	}
	meta, err := inspect(bin)
	if err != nil {
		return "", err
	}
	if err := writeEmbedded(stage); err != nil {
		return "", err
	}
	copyright, err := licences(opts.Root, bin, meta)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(stage, "copyright"), copyright, 0o644); err != nil {
		return "", err
	}

	contents := files.Contents{
		{Source: bin, Destination: binPath, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
		{Source: filepath.Join(stage, "files/reclaimnet.service"), Destination: unitPath, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		{Destination: filepath.Dir(configPath), Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
		{Source: filepath.Join(stage, "files/agent.json"), Destination: configPath, Type: files.TypeConfigNoReplace, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		{Source: filepath.Join(stage, "copyright"), Destination: docDir + "/copyright", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		{Source: filepath.Join(opts.Root, "README.md"), Destination: docDir + "/README.md", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
	}
	docs, err := filepath.Glob(filepath.Join(opts.Root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		return "", fmt.Errorf("no docs/*.md under %s", opts.Root)
	}
	for _, d := range docs {
		contents = append(contents, &files.Content{Source: d, Destination: docDir + "/docs/" + filepath.Base(d), FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}
	pages, err := writeManPages(bin, filepath.Join(stage, "man"))
	if err != nil {
		return "", err
	}
	for _, p := range pages {
		contents = append(contents, &files.Content{Source: p, Destination: manDir + "/" + filepath.Base(p), FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}

	var depends []string
	if meta.glibc != "" {
		depends = append(depends, "libc6 (>= "+meta.glibc+")")
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name:        "reclaimnet",
		Arch:        meta.goarch,
		Platform:    "linux",
		Version:     meta.version,
		Section:     "admin",
		Priority:    "optional",
		Maintainer:  opts.Maintainer,
		Description: description,
		Overridables: nfpm.Overridables{
			Depends:  depends,
			Contents: contents,
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(stage, "files/postinst"),
				PreRemove:   filepath.Join(stage, "files/prerm"),
				PostRemove:  filepath.Join(stage, "files/postrm"),
			},
			Deb: nfpm.Deb{Compression: "gzip"},
		},
	})
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(opts.OutDir, deb.Default.ConventionalFileName(info))
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(out)
		return "", fmt.Errorf("nfpm: %w", err)
	}
	return out, f.Close()
}

const description = `keeps borrowed GPU training jobs alive while lab owners reclaim machines
 ReclaimNet pools the GPUs a university's labs own. Every lab machine runs
 the reclaimnet agent; the agents gossip, elect a Raft leader that
 schedules checkpoints, chooses destinations and admits checkpoint traffic,
 move checkpoints over paced QUIC, and enforce rates and a kill-switch in
 the kernel with TC eBPF, so a job survives its machine being taken back.`

// goBuild builds the release binary: cgo on (NVML), no local paths, no
// symbol table, the version given.
func goBuild(root, out, version string) error {
	ldflags := "-s -w"
	if version != "" {
		if !versionRE.MatchString(version) {
			return fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH[-PRERELEASE], e.g. v0.2.0", version)
		}
		ldflags += " -X github.com/reclaimnet/reclaimnet/cli.Version=" + version
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, b)
	}
	return nil
}

// versionRE is the version the package takes: nfpm turns its
// pre-release into a Debian "~" suffix, which sorts before the release.
var versionRE = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// binaryMeta is what the package says about the binary.
type binaryMeta struct {
	version string // what 'reclaimnet version' reports
	goarch  string
	glibc   string // the newest glibc symbol version it needs ("" if none)
	info    *buildinfo.BuildInfo
}

// inspect reads the binary's version, architecture and glibc needs, and
// refuses one that cannot use NVML.
func inspect(bin string) (binaryMeta, error) {
	var m binaryMeta
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return m, fmt.Errorf("%s: %w", bin, err)
	}
	m.info = bi
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["GOOS"] != "linux" {
		return m, fmt.Errorf("%s is built for %q, not linux", bin, settings["GOOS"])
	}
	if settings["CGO_ENABLED"] != "1" {
		return m, fmt.Errorf("%s is built without cgo: it could not use NVML", bin)
	}
	m.goarch = settings["GOARCH"]
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return m, fmt.Errorf("%s version: %w", bin, err)
	}
	// "reclaimnet v0.1.0-dev (go1.26.0, linux/amd64, cgo on)"
	fields := strings.Fields(string(out))
	if len(fields) < 2 || fields[0] != "reclaimnet" || !versionRE.MatchString(fields[1]) {
		return m, fmt.Errorf("%s version printed %q: want reclaimnet vX.Y.Z", bin, strings.TrimSpace(string(out)))
	}
	m.version = fields[1]
	m.glibc, err = glibcNeeded(bin)
	return m, err
}

// glibcNeeded is the newest GLIBC_x.y version among the binary's imported
// symbols: the package's libc6 dependency.
func glibcNeeded(bin string) (string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return "", err
	}
	defer f.Close()
	syms, err := f.ImportedSymbols()
	if err != nil {
		return "", fmt.Errorf("%s: imported symbols: %w", bin, err)
	}
	var newest []int
	for _, s := range syms {
		v, ok := strings.CutPrefix(s.Version, "GLIBC_")
		if !ok {
			continue
		}
		var parts []int
		for p := range strings.SplitSeq(v, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				parts = nil
				break
			}
			parts = append(parts, n)
		}
		if parts != nil && slices.Compare(parts, newest) > 0 {
			newest = parts
		}
	}
	var s []string
	for _, n := range newest {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, "."), nil
}

// writeEmbedded copies files/ into dir.
func writeEmbedded(dir string) error {
	return fs.WalkDir(packageFiles, "files", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := packageFiles.ReadFile(path)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// writeManPages runs manPages into dir and compresses what it wrote;
// it returns the compressed pages, which the package ships under
// /usr/share/man/man1.
func writeManPages(bin, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := manPages(bin, dir); err != nil {
		return nil, fmt.Errorf("man pages: %w", err)
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var z bytes.Buffer
		w, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(b); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p+".gz", z.Bytes(), 0o644); err != nil {
			return nil, err
		}
		out = append(out, p+".gz")
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("man pages: the generator wrote no *.1 file into %s", dir)
	}
	return out, nil
}

package ckpt

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ignoreCases are trees (a trailing / marks a directory) with ignore
// files; what git makes of each is the expected answer.
var ignoreCases = []struct {
	name     string
	patterns string
	paths    []string
}{
	{"basename glob at any depth", "*.log\n", []string{"a.log", "d/b.log", "d/e/c.log", "keep.txt", "x.log/", "x.log/f"}},
	{"leading slash anchors", "/build\n", []string{"build/", "build/o", "sub/build/", "sub/build/o", "build.txt"}},
	{"middle slash anchors", "docs/*.md\n", []string{"docs/a.md", "x/docs/a.md", "docs/sub/b.md", "docs/c.txt"}},
	{"trailing slash: directories only", "tmp/\n", []string{"tmp/", "tmp/f", "sub/tmp", "other/tmp/", "other/tmp/f"}},
	{"negation", "*.log\n!keep.log\n", []string{"a.log", "keep.log", "d/keep.log", "d/other.log"}},
	{"no re-include under an excluded directory", "build/\n!build/keep.txt\n", []string{"build/keep.txt", "build/x", "keep.txt"}},
	{"re-include a directory under a star", "build/*\n!build/keep/\n", []string{"build/keep/f", "build/other/f", "build/f", "build/"}},
	{"order: last match wins", "!a.txt\n*.txt\n", []string{"a.txt", "b.txt"}},
	{"leading double star", "**/cache\n", []string{"cache/", "cache/f", "a/cache/", "a/cache/g", "a/b/cache", "cached"}},
	{"trailing double star", "out/**\n", []string{"out/", "out/a", "out/b/", "out/b/c", "outer"}},
	{"middle double star", "a/**/b\n", []string{"a/b", "a/x/b", "a/x/y/b", "b", "x/a/b", "a/bb"}},
	{"double star not at a slash is a star", "x**y\nm/n**\n", []string{"xay", "xy", "d/xzzy", "m/nope", "m/n/z", "m/q"}},
	{"question mark and classes", "file?.txt\n[abc]z\n[!x]y\n[^q]w\n[a-c]r\n[[:digit:]]n\n[]]b\n", []string{"file1.txt", "file12.txt", "az", "dz", "xy", "zy", "qw", "pw", "br", "dr", "5n", "xn", "]b"}},
	{"escapes and trailing spaces", "\\#hash\n\\!bang\nspace\\ \ntrail   \nst\\*r\n", []string{"#hash", "!bang", "space ", "space", "trail", "st*r", "stxr"}},
	{"comments, blank lines, CRLF", "# *.txt\n\n   \n*.bak\r\n", []string{"a.txt", "b.bak", "# *.txt"}},
	{"allow-list", "*\n!*/\n!*.keep\n", []string{"a.txt", "d/b.keep", "d/e/c.keep", "d/x", "top.keep"}},
	{"star after slash", "logs/*\n", []string{"logs/", "logs/a", "logs/b/", "logs/b/c", "x/logs/a"}},
	{"wildcard directory pattern", "*-out/\n", []string{"run-out/", "run-out/f", "run-out.txt", "a/b-out/", "a/b-out/g"}},
	{"the ignore file may ignore itself", ".reclaimnetignore\n*.o\n", []string{".reclaimnetignore", "a.o", "a.c"}},
	{"dot slash never matches", "./foo\n", []string{"foo", "d/foo"}},
	{"lone slash and bang match nothing", "/\n!\n!/\n", []string{"a", "d/"}},
	{"unclosed class", "[ab\n", []string{"[ab", "a"}},
	{"anchored directory with star", "/*/tmp/\n", []string{"a/tmp/", "a/tmp/x", "a/b/tmp/", "a/b/tmp/y", "tmp/"}},
}

// gitEnv runs git with no system or user configuration.
func gitCmd(t *testing.T, gitDir, work string, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to check the ignore rules: %v", err)
	}
	cmd := exec.Command("git", append([]string{"--git-dir=" + gitDir, "--work-tree=" + work,
		"-c", "core.excludesFile=" + filepath.Join(work, IgnoreFile)}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	return cmd
}

// makeIgnoreTree lays out paths and the ignore file under a new directory.
func makeIgnoreTree(t *testing.T, patterns string, paths []string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range paths {
		full := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(p, "/")))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if p == IgnoreFile {
			continue
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, IgnoreFile), []byte(patterns), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// gitIgnored asks git check-ignore which of paths it ignores.
func gitIgnored(t *testing.T, gitDir, dir string, paths []string) map[string]bool {
	t.Helper()
	var in bytes.Buffer
	for _, p := range paths {
		in.WriteString(strings.TrimSuffix(p, "/") + "\x00")
	}
	cmd := gitCmd(t, gitDir, dir, "check-ignore", "--no-index", "--stdin", "-z", "-v", "-n")
	cmd.Dir = dir
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("git check-ignore: %v: %s", err, out)
		}
	}
	// -z -v -n: source, line, pattern, path, each NUL-terminated.
	fields := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(fields)%4 != 0 {
		t.Fatalf("git check-ignore output: %q", out)
	}
	got := map[string]bool{}
	for i := 0; i < len(fields); i += 4 {
		pattern, path := fields[i+2], fields[i+3]
		got[path] = pattern != "" && !strings.HasPrefix(pattern, "!")
	}
	return got
}

// TestIgnoreMatchesGit checks every case against git check-ignore run on
// the same tree, path by path, and the bundle's contents against the
// files git ls-files leaves in.
func TestIgnoreMatchesGit(t *testing.T) {
	gitDir := filepath.Join(t.TempDir(), "git")
	if out, err := exec.Command("git", "init", "-q", "--bare", gitDir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	s := openStore(t, t.TempDir(), 0)
	for _, c := range ignoreCases {
		t.Run(c.name, func(t *testing.T) {
			dir := makeIgnoreTree(t, c.patterns, c.paths)
			ig, err := ParseIgnore([]byte(c.patterns))
			if err != nil {
				t.Fatal(err)
			}
			want := gitIgnored(t, gitDir, dir, c.paths)
			var disagree int
			for _, p := range c.paths {
				rel := strings.TrimSuffix(p, "/")
				w, ok := want[rel]
				if !ok {
					t.Fatalf("git said nothing about %q", rel)
				}
				if got := ig.Ignored(rel, strings.HasSuffix(p, "/")); got != w {
					t.Errorf("%q: ignored=%v, git says %v", p, got, w)
					disagree++
				}
			}

			// The bundle holds exactly the files git does not ignore.
			cmd := gitCmd(t, gitDir, dir, "ls-files", "--others", "--exclude-standard", "-z")
			cmd.Dir = dir
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("git ls-files: %v", err)
			}
			wantFiles := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
			if len(out) == 0 {
				wantFiles = nil
			}
			slices.Sort(wantFiles)
			b, err := s.AddBundle(dir, BundleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var gotFiles []string
			for _, f := range b.Manifest.Files {
				if !f.IsDir() {
					gotFiles = append(gotFiles, f.Path)
				}
			}
			if !slices.Equal(gotFiles, wantFiles) {
				t.Errorf("bundle files %q, git leaves in %q", gotFiles, wantFiles)
			}
		})
	}
}

func TestParseIgnoreRejects(t *testing.T) {
	if _, err := ParseIgnore([]byte("a\x00b\n")); err == nil {
		t.Error("NUL byte: accepted")
	}
	if _, err := ParseIgnore(make([]byte, maxIgnoreFile+1)); err == nil {
		t.Error("oversized ignore file: accepted")
	}
}

// FuzzIgnore: no pattern or path makes the matcher panic or hang, and a
// path is ignored whenever its parent directory is.
func FuzzIgnore(f *testing.F) {
	for _, c := range ignoreCases {
		f.Add(c.patterns, c.paths[0])
	}
	f.Add("**/**/*[[:alpha:]\\", "a/b/c")
	f.Fuzz(func(t *testing.T, patterns, p string) {
		ig, err := ParseIgnore([]byte(patterns))
		if err != nil {
			return
		}
		p = strings.Trim(p, "/")
		if p == "" || validPath(p) != nil {
			return
		}
		got := ig.Ignored(p, false)
		if dir := filepath.Dir(p); dir != "." && ig.Ignored(dir, true) && !got {
			t.Fatalf("%q ignored but not %q under it", dir, p)
		}
	})
}

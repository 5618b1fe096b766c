package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoFiles lists the repository's tracked files (the working tree's files
// where git or its metadata is missing, as in a source archive).
func repoFiles(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("git", "ls-files", "-z").Output(); err == nil && len(out) > 0 {
		return strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	}
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			files = append(files, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func inTestdata(path string) bool {
	return slices.Contains(strings.Split(path, "/"), "testdata")
}

// TestNothingRefersOutsideTheRepository: a fresh clone has nothing beside
// it, so no file outside testdata/ may point at files outside the
// repository (the project's reference notes or public traces in a sibling
// directory). The needles are split so this file does not match itself.
func TestNothingRefersOutsideTheRepository(t *testing.T) {
	files := repoFiles(t)
	if len(files) < 50 {
		t.Fatalf("found only %d files; the listing is broken", len(files))
	}
	names := map[string]bool{}
	for _, f := range files {
		names[filepath.Base(f)] = true
	}
	var needles []string
	needles = append(needles, ".."+"/shared", "shared"+"/traces")
	// Documents of that directory, unless the repository has its own.
	for _, doc := range []string{"SPEC", "ARCHITECTURE", "STACK", "STYLE"} {
		if !names[doc+".md"] {
			needles = append(needles, doc+".md")
		}
	}
	for _, f := range files {
		if inTestdata(f) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(b, []byte("\n")) {
			for _, n := range needles {
				if bytes.Contains(line, []byte(n)) {
					t.Errorf("%s:%d refers to %q, outside the repository", f, i+1, n)
				}
			}
		}
	}
}

// history matches development history in prose: numbered rounds of work
// (the word session or round followed by a number) and internal bug letters
// (bug followed by a capital letter).
var history = regexp.MustCompile(`(?i:\b(sessions?|rounds?) \d+)|\b[Bb]ugs? [A-Z]\b`)

// TestDocsDescribeTheSoftware: docs and comments say what the software does
// and why; git log keeps how it got there.
func TestDocsDescribeTheSoftware(t *testing.T) {
	checked := 0
	for _, f := range repoFiles(t) {
		if !strings.HasSuffix(f, ".md") && !strings.HasSuffix(f, ".go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			if m := history.FindString(line); m != "" {
				t.Errorf("%s:%d names development history (%q): %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d .md and .go files; the listing is broken", checked)
	}
}

// TestHistoryPattern keeps the pattern honest: it catches the forms of
// development history and passes ordinary prose.
func TestHistoryPattern(t *testing.T) {
	// Built from pieces, so this file does not match itself.
	for _, s := range []string{"measured in session" + " 5", "Sessions" + " 4–6", "(round" + " 2)", "campus bug" + " C", "Bugs" + " A and B"} {
		if !history.MatchString(s) {
			t.Errorf("%q: not caught", s)
		}
	}
	for _, s := range []string{"a QUIC session", "rounds to the nearest second", "at most K rounds", "a bug in the kernel", "Bug reports"} {
		if history.MatchString(s) {
			t.Errorf("%q: caught, but is not history", s)
		}
	}
}

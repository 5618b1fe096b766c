package ckpt

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func sampleManifest() *Manifest {
	c1, c2, c3 := Sum([]byte("a")), Sum([]byte("bb")), Sum([]byte("ccc"))
	return &Manifest{
		JobID: "job-1", Version: 7, Created: time.Unix(1700000000, 123).UTC(),
		Files: []File{
			{Path: "model.pt", Size: 3, Mode: 0o644, Hash: Sum([]byte("abb")), Chunks: []ChunkRef{{c1, 1}, {c2, 2}}},
			{Path: "sub/dir/opt state.pt", Size: 4, Mode: 0o600, Hash: Sum([]byte("accc")), Chunks: []ChunkRef{{c1, 1}, {c3, 3}}},
			{Path: "zero", Size: 0, Mode: 0o644, Hash: Sum(nil)},
		},
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := sampleManifest()
	enc := m.Encode()
	got, err := ParseManifest(enc)
	if err != nil {
		t.Fatalf("ParseManifest: %v\n%s", err, enc)
	}
	if got.Hash() != m.Hash() {
		t.Fatalf("hash after round trip: got %s, want %s", got.Hash(), m.Hash())
	}
	if !got.Created.Equal(m.Created) || got.JobID != m.JobID || got.Version != m.Version || len(got.Files) != 3 {
		t.Fatalf("round trip: got %+v, want %+v", got, m)
	}
	if n := len(got.Chunks()); n != 3 {
		t.Errorf("distinct chunks: got %d, want 3", n)
	}
	if got.TotalSize() != 7 {
		t.Errorf("total size: got %d, want 7", got.TotalSize())
	}
}

func TestManifestRejects(t *testing.T) {
	good := string(sampleManifest().Encode())
	cases := map[string]string{
		"empty":          "",
		"magic":          strings.Replace(good, "v1", "v2", 1),
		"trailing":       good + "x",
		"no end":         strings.TrimSuffix(good, "end\n"),
		"size mismatch":  strings.Replace(good, `"model.pt" 3`, `"model.pt" 4`, 1),
		"abs path":       strings.Replace(good, `"model.pt"`, `"/model.pt"`, 1),
		"dotdot":         strings.Replace(good, `"model.pt"`, `"../model.pt"`, 1),
		"unsorted":       strings.Replace(good, `"zero"`, `"a"`, 1),
		"upper hex":      strings.Replace(good, Sum([]byte("a")).String(), strings.ToUpper(Sum([]byte("a")).String()), 1),
		"non canonical":  strings.Replace(good, "version 7", "version 07", 1),
		"bad job":        strings.Replace(good, `"job-1"`, `"job/1"`, 1),
		"huge count":     strings.Replace(good, "files 3", "files 99999999", 1),
		"chunk count":    strings.Replace(good, "644 "+Sum([]byte("abb")).String()+" 2", "644 "+Sum([]byte("abb")).String()+" 9999999", 1),
		"file is dir":    strings.Replace(good, `"zero"`, `"sub/dir"`, 1),
		"negative chunk": strings.Replace(good, Sum([]byte("bb")).String()+" 2", Sum([]byte("bb")).String()+" -2", 1),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if in == good {
				t.Fatal("case did not change the input")
			}
			_, err := ParseManifest([]byte(in))
			if !errors.Is(err, ErrBadManifest) {
				t.Fatalf("got %v, want ErrBadManifest", err)
			}
		})
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add(sampleManifest().Encode())
	f.Add((&Manifest{JobID: "j", Version: 1}).Encode())
	f.Add([]byte("reclaimnet-manifest v1\njob \"x\"\nversion 1\ncreated 0\nfiles 1\nfile \"a\" 1 644 " + Sum(nil).String() + " 1\n"))
	f.Add([]byte{})
	tree := &Manifest{JobID: "j", Version: 1, Files: []File{{Path: "d", Mode: ModeDir | 0o755}, linkEntry("d/l", ".."), linkEntry("l", "d/l/d")}}
	f.Add(tree.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrBadManifest) {
				t.Fatalf("error does not wrap ErrBadManifest: %v", err)
			}
			return
		}
		if string(m.Encode()) != string(b) {
			t.Fatalf("accepted non-canonical input")
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted invalid manifest: %v", err)
		}
	})
}

func linkEntry(p, target string) File {
	return File{Path: p, Mode: ModeSymlink | 0o777, Size: int64(len(target)), Hash: Sum([]byte(target)), Target: target}
}

func TestManifestEntryKinds(t *testing.T) {
	d := []byte("data")
	file := func(p string) File {
		return File{Path: p, Size: 4, Mode: 0o644, Hash: Sum(d), Chunks: []ChunkRef{{Sum(d), 4}}}
	}
	ok := &Manifest{JobID: "j", Version: 1, Files: []File{
		file("a/f"), linkEntry("a/l", "f"), {Path: "d", Mode: ModeDir | 0o700}, linkEntry("d/up", "../a/f"), linkEntry("top", "a"),
	}}
	sortFiles(ok.Files)
	m, err := ParseManifest(ok.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if m.Hash() != ok.Hash() || m.Files[1].Target != "f" || !m.Files[2].IsDir() {
		t.Fatalf("round trip changed the manifest: %+v", m.Files)
	}
	bad := map[string][]File{
		"absolute target":        {linkEntry("l", "/etc/passwd")},
		"target climbing out":    {linkEntry("l", "../x")},
		"dangling target":        {linkEntry("l", "nothere")},
		"loop":                   {linkEntry("a", "b"), linkEntry("b", "a")},
		"through a file":         {file("f"), linkEntry("l", "f/x")},
		"out through a link":     {linkEntry("l", "self/.."), linkEntry("self", ".")},
		"entry under a symlink":  {linkEntry("a", "b"), file("a/x"), {Path: "b", Mode: ModeDir | 0o755}},
		"symlink with chunks":    {{Path: "l", Mode: ModeSymlink | 0o777, Size: 4, Hash: Sum(d), Target: "data", Chunks: []ChunkRef{{Sum(d), 4}}}},
		"symlink hash wrong":     {{Path: "l", Mode: ModeSymlink | 0o777, Size: 1, Hash: Sum(d), Target: "x"}},
		"directory with a size":  {{Path: "d", Mode: ModeDir | 0o755, Size: 1}},
		"unknown type":           {{Path: "p", Mode: 0o010644}},
		"target on a plain file": {{Path: "f", Mode: 0o644, Target: "x"}},
	}
	for name, files := range bad {
		m := &Manifest{JobID: "j", Version: 1, Files: files}
		sortFiles(m.Files)
		if err := m.Validate(); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: got %v, want ErrBadManifest", name, err)
		}
	}
}

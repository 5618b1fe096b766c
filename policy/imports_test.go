package policy

import (
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsStandardLibraryOnly enforces that the policy core stays pure:
// its non-test files import only the standard library, and nothing that
// reaches the network, the disk, a clock-driven runtime or unsafe code.
func TestImportsStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"net", "os", "io/fs", "unsafe", "syscall", "math/rand", "crypto/rand", "log", "runtime", "plugin", "reflect", "embed"}
	checked := 0
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checked++
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatalf("%s: bad import %s", name, imp.Path.Value)
			}
			pkg, err := build.Default.Import(path, ".", build.FindOnly)
			if err != nil || !pkg.Goroot || strings.Contains(path, ".") {
				t.Errorf("%s imports %q, which is not in the standard library", name, path)
				continue
			}
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %q: policy code must not touch the OS, the network, global randomness or reflection", name, path)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d files; the glob is broken", checked)
	}
	if _, err := os.Stat("tick.go"); err != nil {
		t.Fatalf("tick.go missing from the package directory: %v", err)
	}
}

package owner

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// coreFiles are the policy's pure core: no clock, no file, no process.
var coreFiles = []string{"window.go", "config.go", "policy.go", "status.go", "outlook.go"}

// TestCoreIsPure keeps the core to the standard library minus the parts
// that reach the machine, and keeps it from reading the clock: time is
// always an argument.
func TestCoreIsPure(t *testing.T) {
	banned := map[string]bool{"os": true, "os/exec": true, "io/fs": true, "path/filepath": true, "net": true, "syscall": true, "math/rand": true, "math/rand/v2": true, "unsafe": true}
	clock := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true, "Tick": true, "NewTimer": true, "NewTicker": true, "AfterFunc": true}
	for _, name := range coreFiles {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if banned[p] || strings.Contains(p, ".") {
				t.Errorf("%s imports %s", name, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" && clock[sel.Sel.Name] {
					t.Errorf("%s calls time.%s", name, sel.Sel.Name)
				}
			}
			return true
		})
	}
}

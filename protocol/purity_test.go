package protocol

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The pure core imports only the standard library, starts no goroutine and
// reads no clock, randomness or environment: checked on the package source.
func TestPurity(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]bool{"time": true, "math/rand": true, "math/rand/v2": true, "crypto/rand": true,
		"os": true, "net": true, "net/http": true, "sync": true, "io/fs": true, "os/exec": true, "syscall": true, "unsafe": true}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(strings.Split(path, "/")[0], ".") {
				t.Errorf("%s imports %q: protocol imports only the standard library", name, path)
			}
			if forbidden[path] {
				t.Errorf("%s imports %q: protocol does no I/O and reads no clock or randomness", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: go statement at %s", name, fset.Position(g.Pos()))
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}

// Folding the same log twice gives byte-identical JSON state, and a fold
// never mutates an event it was given.
func TestFoldDeterministicAndNonMutating(t *testing.T) {
	log := realisticLog(5, 40)
	before, _ := json.Marshal(log)
	fold := func() []byte {
		s := NewAIState()
		for _, ev := range log {
			if err := Fold(s, ev); err != nil {
				t.Fatal(err)
			}
		}
		b, err := MarshalState(s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := fold(), fold()
	if !bytes.Equal(a, b) {
		t.Fatal("two folds of the same log differ")
	}
	after, _ := json.Marshal(log)
	if !bytes.Equal(before, after) {
		t.Fatal("fold mutated its events")
	}
	if len(log) < 50 || !bytes.Contains(a, []byte(`"role":"assistant"`)) {
		t.Fatalf("the log is not realistic: %d events", len(log))
	}
}

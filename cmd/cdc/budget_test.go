package main

import (
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestFrontDoorsKeepTheirBudgets: the two front doors stay thin (issue
// 45; docs/design.md, "The operations room"): cmd/cdc at most 1,950
// lines and internal/console at most 850, test files not counted, lines
// as wc -l counts them; and the console imports none of admin, replay or
// store, whose work it reaches through internal/ops. Over budget, move
// what is not parsing, printing, HTTP, auth, the page or the lag history
// to the package it belongs to, rather than squeezing lines.
func TestFrontDoorsKeepTheirBudgets(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		dir     string
		budget  int
		console bool
	}{{".", 1950, false}, {"../../internal/console", 850, true}} {
		files, err := filepath.Glob(filepath.Join(b.dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", b.dir, err)
		}
		lines := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			lines += bytes.Count(src, []byte("\n"))
			if !b.console {
				continue
			}
			ast, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range ast.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				switch strings.TrimPrefix(p, "github.com/walpost/walpost/internal/") {
				case "admin", "replay", "store":
					t.Errorf("%s imports %s: the console reaches it through internal/ops", f, p)
				}
			}
		}
		t.Logf("%s: %d lines (budget %d)", b.dir, lines, b.budget)
		if lines > b.budget {
			t.Errorf("%s: %d lines, over its budget of %d (test files not counted): move code to where it belongs", b.dir, lines, b.budget)
		}
	}
}

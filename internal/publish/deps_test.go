package publish_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSinksDoNotImportEachOther reads the imports of every Go file
// (tests included) under internal/publish and fails when a sink's package
// tree (a folder whose package registers a kind with publish.Register,
// and its subfolders, e.g. sqs/sqsfake) imports another sink's tree. What
// two sinks share lives in a package of its own (awsbatch, envelope,
// nametmpl, sinktest), which imports no sink.
func TestSinksDoNotImportEachOther(t *testing.T) {
	const module = "github.com/walpost/walpost/internal/publish/"
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string][]string{} // folder under internal/publish → import paths, with the file
	sinks := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "testdata" {
			continue
		}
		err := filepath.WalkDir(e.Name(), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			for _, im := range f.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				imports[e.Name()] = append(imports[e.Name()], path+" imports "+p)
			}
			if filepath.Dir(path) == e.Name() && !strings.HasSuffix(path, "_test.go") {
				src, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if strings.Contains(string(src), "publish.Register(") {
					sinks[e.Name()] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"sqs", "sns", "kafka", "file"} {
		if !sinks[want] {
			t.Fatalf("found no sink %s: the test no longer recognises sinks (found %v)", want, sinks)
		}
	}
	for dir, list := range imports {
		if !sinks[dir] {
			continue
		}
		for _, line := range list {
			p := line[strings.LastIndex(line, " ")+1:]
			rest, ok := strings.CutPrefix(p, module)
			if !ok {
				continue
			}
			other, _, _ := strings.Cut(rest, "/")
			if other != dir && sinks[other] {
				t.Errorf("%s: a sink imports sink %s; move what they share into a package of its own (as awsbatch)", line, other)
			}
		}
	}
}

package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walpost/walpost/internal/config"
)

// TestDurationFieldsCarryTheirUnit: a duration in cdc's log is a whole
// number of milliseconds (9220, not zerolog's default 9220.41), and every
// duration field of the product's code is named with its unit (_ms), so
// that a reader of a JSON record never has to guess it.
func TestDurationFieldsCarryTheirUnit(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(config.Log{Level: "info", Format: "json"}, &buf, false)
	log.Info().Dur("retry_in_ms", 9220410*time.Microsecond).Msg("x")
	if !strings.Contains(buf.String(), `"retry_in_ms":9220,`) {
		t.Errorf("a duration of 9.22041 s logs as %s, want \"retry_in_ms\":9220", buf.String())
	}

	field := regexp.MustCompile(`\.Dur\("([^"]+)"`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range field.FindAllSubmatch(b, -1) {
			if !strings.HasSuffix(string(m[1]), "_ms") {
				t.Errorf("%s: duration field %q does not end in _ms (docs/operations.md, \"Exit codes and errors\")", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

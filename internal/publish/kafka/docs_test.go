package kafka

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/walpost/walpost/internal/config"
	"github.com/walpost/walpost/internal/publish/tlsconf/tlstest"
)

// TestDocExamplesAreValid: every sinks: example of docs/sinks/kafka.md
// opens (the ${VAR}s given a value, ca_file a CA that exists), so that
// the page shows no key the sink refuses.
func TestDocExamplesAreValid(t *testing.T) {
	b, err := os.ReadFile("../../../docs/sinks/kafka.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	ca := tlstest.NewPKI(t).CAFile
	n := 0
	for _, m := range blocks {
		doc := regexp.MustCompile(`\$\{[A-Z_]+\}`).ReplaceAllString(m[1], "s3cret")
		doc = regexp.MustCompile(`ca_file: [^,}\s]+`).ReplaceAllString(doc, "ca_file: "+ca)
		var c struct {
			Sinks []config.Sink `yaml:"sinks"`
		}
		if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
			t.Errorf("%v\n%s", err, doc)
			continue
		}
		for i := range c.Sinks {
			if !strings.EqualFold(c.Sinks[i].Kind, "kafka") {
				continue
			}
			n++
			s, err := New(&c.Sinks[i], zerolog.Nop())
			if err != nil {
				t.Errorf("%v\n%s", err, doc)
				continue
			}
			s.Close()
		}
	}
	if n < 4 {
		t.Fatalf("%d kafka sink examples found, want at least 4", n)
	}
}

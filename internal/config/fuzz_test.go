package config

import (
	"bytes"
	"strings"
	"testing"
)

// fuzzSink has a setting of each type a sink kind uses, so that FuzzLoad
// also runs Sink.Decode into each.
type fuzzSink struct {
	Brokers    []string          `yaml:"brokers"`
	Topic      string            `yaml:"topic"`
	BatchSize  int               `yaml:"batch_size"`
	BatchBytes int64             `yaml:"batch_bytes"`
	MaxRetries *int              `yaml:"max_retries"`
	Fsync      *bool             `yaml:"fsync"`
	Sessions   bool              `yaml:"sessions"`
	Ratio      float64           `yaml:"ratio"`
	Port       uint16            `yaml:"port"`
	Timeout    Duration          `yaml:"timeout"`
	Linger     *Duration         `yaml:"linger"`
	Headers    map[string]string `yaml:"headers"`
	Extra      any               `yaml:"extra"`
	Path       string            `yaml:"path"`
	SASL       *struct {
		Mechanism string `yaml:"mechanism"`
		Username  string `yaml:"username"`
		Password  string `yaml:"password"`
	} `yaml:"sasl"`
	ConnectionString string `yaml:"connection_string"`
	Inline           `yaml:",inline"`
}

type Inline struct {
	Queue string `yaml:"queue"`
}

// FuzzLoad: Parse, Sink.Decode and Secrets never panic, whatever the file
// and the environment hold, and no error repeats a value that came from
// the environment: the fuzzed secret, given as ${PW} (and, when viaEnv is
// set, inside CDC_POSTGRES_URL), is wrapped in markers so that it cannot
// be confused with the text of a message.
func FuzzLoad(f *testing.F) {
	f.Fuzz(func(t *testing.T, file []byte, secret string, viaEnv bool) {
		marked := "Zq7" + secret + "Xw9"
		e := map[string]string{"PW": marked, "N": "500", "EMPTY": ""}
		if viaEnv {
			e["CDC_POSTGRES_URL"] = "postgres://app:" + marked + "@h/db"
		}
		leaks := func(what string, err error) {
			if err != nil && strings.Contains(err.Error(), marked) && !bytes.Contains(file, []byte(marked)) {
				t.Fatalf("%s: error repeats the secret %q: %v", what, marked, err)
			}
		}
		c, err := Parse(file, env(e))
		leaks("Parse", err)
		if err != nil {
			return
		}
		for i := range c.Sinks {
			var s fuzzSink
			leaks("Sink.Decode", c.Sinks[i].Decode(&s))
			var none struct{}
			leaks("Sink.Decode", c.Sinks[i].Decode(&none))
		}
		_ = c.Secrets()
	})
}

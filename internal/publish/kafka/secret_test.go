package kafka

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/walpost/walpost/internal/publish/sinktest"
)

// TestSCRAMPasswordIsNotRepeated: a password that SASLprep refuses is a
// configuration error naming sasl.password, without the password (the
// SCRAM library's own error quotes it).
func TestSCRAMPasswordIsNotRepeated(t *testing.T) {
	for _, c := range []struct{ user, pw, want string }{
		{"u", "s3cret\x01KEY", "sasl.password: not valid for SCRAM"},
		{"u\x07ser", "s3cretKEY", "sasl.username: not valid for SCRAM"},
	} {
		doc := "{name: events, kind: kafka, brokers: [\"h:9092\"], topic: t, sasl: {mechanism: SCRAM-SHA-256, username: \"" +
			strings.ReplaceAll(c.user, "\x07", `\a`) + "\", password: \"" + strings.ReplaceAll(c.pw, "\x01", `\x01`) + "\"}}"
		_, err := New(sinktest.SinkConfig(t, doc), zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: err = %v, want one containing %q and not the password", doc, err, c.want)
		}
	}
}

package config

import (
	"strings"
	"testing"
)

// TestReceiveBufferIsDeprecatedButAccepted: postgres.receive_buffer set to
// any value it took is still accepted and draws one deprecation naming
// the key; left out, no deprecation.
func TestReceiveBufferIsDeprecatedButAccepted(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Deprecations(); len(d) != 0 {
		t.Fatalf("deprecations of a config without receive_buffer: %q", d)
	}
	for v, want := range map[string]string{"auto": "remove the key", "kernel": "remove the key", "131072": "size 131072 is still set"} {
		y := strings.Replace(minimal, "postgres:\n", "postgres:\n  receive_buffer: "+v+"\n", 1)
		c, err := Parse([]byte(y), env(nil))
		if err != nil {
			t.Fatalf("receive_buffer %s: %v", v, err)
		}
		d := c.Deprecations()
		if len(d) != 1 || !strings.HasPrefix(d[0], "postgres.receive_buffer is deprecated") || !strings.Contains(d[0], want) {
			t.Errorf("receive_buffer %s: deprecations %q, want one naming the key and saying %q", v, d, want)
		}
	}
}

package config

import (
	"strings"
	"testing"
)

func TestReceiveBufferIsAutoKernelOrASize(t *testing.T) {
	c, err := Parse([]byte(minimal), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Postgres.ReceiveBuffer != "auto" || c.Postgres.ReceiveBufferBytes() != 0 {
		t.Fatalf("default receive_buffer %q (%d), want auto (0)", c.Postgres.ReceiveBuffer, c.Postgres.ReceiveBufferBytes())
	}
	for v, want := range map[string]int{"auto": 0, "kernel": 0, "65536": 65536, `"131072"`: 131072, "67108864": 64 << 20} {
		y := strings.Replace(minimal, "postgres:\n", "postgres:\n  receive_buffer: "+v+"\n", 1)
		c, err := Parse([]byte(y), env(nil))
		if err != nil {
			t.Errorf("receive_buffer %s: %v", v, err)
			continue
		}
		if got := c.Postgres.ReceiveBufferBytes(); got != want {
			t.Errorf("receive_buffer %s: %d, want %d", v, got, want)
		}
	}
	for _, bad := range []string{"4096", "65535", "67108865", "64KiB", "-1", "0", "off", "[1]"} {
		y := strings.Replace(minimal, "postgres:\n", "postgres:\n  receive_buffer: "+bad+"\n", 1)
		_, err := Parse([]byte(y), env(nil))
		if err == nil || !strings.Contains(err.Error(), "postgres.receive_buffer") {
			t.Errorf("receive_buffer %s: %v, want an error naming postgres.receive_buffer", bad, err)
		}
	}
}

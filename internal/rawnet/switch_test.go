package rawnet

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestParseSwitchTurnsOffOnlyForOffWords(t *testing.T) {
	for _, c := range []struct {
		v         string
		on, known bool
	}{
		{"", true, true}, {"off", false, true}, {"OFF", false, true}, {" off ", false, true}, {"false", false, true},
		{"no", false, true}, {"0", false, true}, {"on", true, true}, {"1", true, true}, {"yes", true, true},
		{"disable", true, false}, {"of", true, false},
	} {
		s := ParseSwitch("WALPOST_X", c.v)
		if s.On != c.on || s.Known() != c.known || s.Set() != (c.v != "") || s.Env != "WALPOST_X" || s.Value != c.v {
			t.Errorf("%q: %+v (known %v, set %v), want on %v known %v", c.v, s, s.Known(), s.Set(), c.on, c.known)
		}
	}
}

// logged returns the lines Switch.Log wrote, decoded.
func logged(t *testing.T, s Switch) []map[string]any {
	t.Helper()
	var buf bytes.Buffer
	s.Log(zerolog.New(&buf), "thing")
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestSwitchLogsAtInfoWhenSetAndNothingWhenUnset(t *testing.T) {
	if l := logged(t, ParseSwitch("WALPOST_X", "")); len(l) != 0 {
		t.Errorf("unset switch logged %v", l)
	}
	l := logged(t, ParseSwitch("WALPOST_X", "off"))
	if len(l) != 1 || l[0]["level"] != "info" || l[0]["env"] != "WALPOST_X" || l[0]["on"] != false || l[0]["mechanism"] != "thing" ||
		!strings.Contains(l[0]["message"].(string), "switched off") {
		t.Errorf("off: %v", l)
	}
	if l := logged(t, ParseSwitch("WALPOST_X", "on")); len(l) != 1 || l[0]["level"] != "info" || l[0]["on"] != true {
		t.Errorf("on: %v", l)
	}
	if l := logged(t, ParseSwitch("WALPOST_X", "disable")); len(l) != 1 || l[0]["level"] != "warn" || l[0]["on"] != true {
		t.Errorf("a value not understood: %v, want a warning that the mechanism stays on", l)
	}
}

// With WALPOST_RAWNET=off, Wrap leaves a socket as it is: reads and
// writes go through net.Conn.
func TestWrapLeavesTheSocketAloneWhenSwitchedOff(t *testing.T) {
	saved := rawSwitch
	t.Cleanup(func() { rawSwitch = saved })
	rawSwitch = ParseSwitch(EnvRawSyscalls, "off")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if w := Wrap(c); w != c || Of(w) != nil {
		t.Fatalf("Wrap with %s=off returned %T, want the connection itself", EnvRawSyscalls, w)
	}
	if Setting().On {
		t.Fatal("Setting reports raw system calls on")
	}
	rawSwitch = ParseSwitch(EnvRawSyscalls, "")
	if w := Wrap(c); rawSyscalls && Of(w) == nil {
		t.Fatalf("Wrap with the switch unset returned %T, want a Conn", w)
	}
}

package pgconnect

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

// TestKeepaliveKeysSetTheDialerNotARuntimeParameter: libpq's keepalive
// keywords, and the ADO.NET keys that become them, never reach the server
// as run-time parameters (it refuses them: "unrecognized configuration
// parameter"); they set the TCP keepalive of the dialer. A value that is
// not a number is an error naming the keyword.
func TestKeepaliveKeysSetTheDialerNotARuntimeParameter(t *testing.T) {
	for _, s := range []string{
		"Host=h;Username=u;Password=p;Keepalive=30;Tcp Keepalive=true",
		"Host=h;Username=u;Password=p;Tcp Keepalive=false",
		"postgres://u:p@h/db?keepalives_idle=20&keepalives_interval=5&keepalives_count=3",
		"host=h user=u keepalives=1",
	} {
		cfg, err := Config(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		for k := range cfg.RuntimeParams {
			if strings.HasPrefix(k, "keepalive") {
				t.Errorf("%s: %s is sent to the server as a run-time parameter", s, k)
			}
		}
	}
	if ka, set, err := KeepAlive(map[string]string{}); err != nil || set || !ka.Enable {
		t.Errorf("no keyword: %v %v %v", ka, set, err)
	}
	for _, c := range []struct {
		params map[string]string
		want   net.KeepAliveConfig
	}{
		{map[string]string{"keepalives_idle": "30", "keepalives": "1"}, net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second}},
		{map[string]string{"keepalives": "0"}, net.KeepAliveConfig{}},
		{map[string]string{"keepalives_interval": "5", "keepalives_count": "3"}, net.KeepAliveConfig{Enable: true, Interval: 5 * time.Second, Count: 3}},
	} {
		if ka, set, err := KeepAlive(c.params); err != nil || !set || ka != c.want {
			t.Errorf("%v: %+v %v %v, want %+v", c.params, ka, set, err, c.want)
		}
	}
	for _, s := range []string{"postgres://u:p@h/db?keepalives_idle=abc", "Host=h;Username=u;Password=p;Keepalive=-3"} {
		_, err := Config(s)
		if !errors.Is(err, ErrURL) || !strings.Contains(err.Error(), "keepalives_idle must be a whole number (seconds)") {
			t.Errorf("%s: %v, want an error naming keepalives_idle", s, err)
		}
	}
}

// TestTrustServerCertificate: Trust Server Certificate=true is what
// libpq's sslmode prefer and require do already (encrypt, no
// verification): accepted there; with VerifyCA or VerifyFull it
// contradicts the SSL Mode, and the error says which key to drop or which
// mode to use.
func TestTrustServerCertificate(t *testing.T) {
	for _, s := range []string{
		"Host=h;Username=u;Password=p;SSL Mode=Require;Trust Server Certificate=true",
		"Host=h;Username=u;Password=p;Trust Server Certificate=true",
		"Host=h;Username=u;Password=p;SSL Mode=VerifyFull;TrustServerCertificate=false",
	} {
		cfg, err := Config(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		for k := range cfg.RuntimeParams {
			if strings.Contains(strings.ToLower(k), "trust") {
				t.Errorf("%s: %s sent to the server", s, k)
			}
		}
	}
	_, err := Config("Host=h;Username=u;Password=s3cret;SSL Mode=VerifyFull;Trust Server Certificate=true")
	if !errors.Is(err, ErrADONET) || !strings.Contains(err.Error(), "drop Trust Server Certificate") ||
		!strings.Contains(err.Error(), "SSL Mode=Require") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("VerifyFull with Trust Server Certificate=true: %v", err)
	}
	if _, err := Config("Host=h;Username=u;Password=p;Trust Server Certificate=maybe"); !errors.Is(err, ErrADONET) || !strings.Contains(err.Error(), "Trust Server Certificate is not true or false") {
		t.Errorf("Trust Server Certificate=maybe: %v", err)
	}
}

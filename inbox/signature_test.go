package inbox

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestVerifySignature: a signature made by Sign verifies with the same
// secret (or among several, as during a rotation) within the tolerance;
// every change of body, secret, timestamp or header fails with the
// error that says which.
func TestVerifySignature(t *testing.T) {
	secret, other := []byte("shared secret"), []byte("another secret")
	body := []byte(`{"id":"m1","n":1}`)
	at := time.Unix(1767225600, 0)
	h := Sign(secret, at, body)
	if want := "t=1767225600,v1="; !strings.HasPrefix(h, want) || len(h) != len(want)+64 {
		t.Fatalf("Sign = %q, want %s<64 hex digits>", h, want)
	}
	sig := strings.TrimPrefix(h, "t=1767225600,v1=")
	for _, c := range []struct {
		name      string
		header    string
		body      string
		now       time.Time
		tolerance time.Duration
		secrets   [][]byte
		want      error // nil: verifies
	}{
		{"as signed", h, string(body), at, 0, [][]byte{secret}, nil},
		{"within the default tolerance", h, string(body), at.Add(4 * time.Minute), 0, [][]byte{secret}, nil},
		{"one of several secrets", h, string(body), at, 0, [][]byte{other, secret}, nil},
		{"a second scheme beside v1", "t=1767225600,v0=abc,v1=" + sig + ",v2=zz", string(body), at, 0, [][]byte{secret}, nil},
		{"one of several signatures", "t=1767225600,v1=" + strings.Repeat("0", 64) + ",v1=" + sig, string(body), at, 0, [][]byte{secret}, nil},
		{"no header", "", string(body), at, 0, [][]byte{secret}, ErrNoSignature},
		{"body changed", h, string(body) + " ", at, 0, [][]byte{secret}, ErrBadSignature},
		{"other secret", h, string(body), at, 0, [][]byte{other}, ErrBadSignature},
		{"empty secrets only", h, string(body), at, 0, [][]byte{nil, {}}, ErrBadSignature},
		{"timestamp changed", strings.Replace(h, "t=1767225600", "t=1767225601", 1), string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"no timestamp", "v1=" + sig, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"signed timestamp", "t=+1767225600,v1=" + sig, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"timestamp twice", "t=1767225600,t=1767225600,v1=" + sig, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"no v1", "t=1767225600", string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"v1 not hex", "t=1767225600,v1=" + strings.Repeat("g", 64), string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"malformed", "garbage", string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"stale", h, string(body), at.Add(6 * time.Minute), 0, [][]byte{secret}, ErrStaleSignature},
		{"from the future", h, string(body), at.Add(-6 * time.Minute), 0, [][]byte{secret}, ErrStaleSignature},
		{"stale for a short tolerance", h, string(body), at.Add(31 * time.Second), 30 * time.Second, [][]byte{secret}, ErrStaleSignature},
		{"within a long tolerance", h, string(body), at.Add(time.Hour), 2 * time.Hour, [][]byte{secret}, nil},
	} {
		err := VerifySignature(c.header, []byte(c.body), c.now, c.tolerance, c.secrets...)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: VerifySignature = %v, want %v", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") && strings.Contains(err.Error(), string(secret)) {
			t.Errorf("%s: the error repeats the secret: %v", c.name, err)
		}
	}
}

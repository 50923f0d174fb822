package inbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestVerifySignature: a signature made by Sign verifies with the same
// key and secret (or among several, as during a rotation) within the
// tolerance; every change of key, body, secret, timestamp or header fails
// with the error that says which.
func TestVerifySignature(t *testing.T) {
	secret, other := []byte("shared secret"), []byte("another secret")
	body := []byte(`{"id":"m1","n":1}`)
	at := time.Unix(1767225600, 0)
	const key = "0190b4c4-5c1e-7e22-9a3b-3f1c2d4e5f60"
	h := Sign(secret, at, key, body)
	if want := "t=1767225600,v1="; !strings.HasPrefix(h, want) || len(h) != len(want)+64 {
		t.Fatalf("Sign = %q, want %s<64 hex digits>", h, want)
	}
	sig := strings.TrimPrefix(h, "t=1767225600,v1=")
	// The signed string, as docs/sinks/webhook.md spells it for other
	// languages: "<t>.<key>\n<body>".
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("1767225600." + key + "\n" + string(body)))
	if want := hex.EncodeToString(m.Sum(nil)); sig != want {
		t.Fatalf("Sign's v1 = %s, want HMAC-SHA256 of \"<t>.<key>\\n<body>\" = %s", sig, want)
	}
	for _, c := range []struct {
		name      string
		header    string
		key       string
		body      string
		now       time.Time
		tolerance time.Duration
		secrets   [][]byte
		want      error // nil: verifies
	}{
		{"as signed", h, key, string(body), at, 0, [][]byte{secret}, nil},
		{"within the default tolerance", h, key, string(body), at.Add(4 * time.Minute), 0, [][]byte{secret}, nil},
		{"one of several secrets", h, key, string(body), at, 0, [][]byte{other, secret}, nil},
		{"a second scheme beside v1", "t=1767225600,v0=abc,v1=" + sig + ",v2=zz", key, string(body), at, 0, [][]byte{secret}, nil},
		{"one of several signatures", "t=1767225600,v1=" + strings.Repeat("0", 64) + ",v1=" + sig, key, string(body), at, 0, [][]byte{secret}, nil},
		{"no header", "", key, string(body), at, 0, [][]byte{secret}, ErrNoSignature},
		{"body changed", h, key, string(body) + " ", at, 0, [][]byte{secret}, ErrBadSignature},
		{"other secret", h, key, string(body), at, 0, [][]byte{other}, ErrBadSignature},
		{"empty secrets only", h, key, string(body), at, 0, [][]byte{nil, {}}, ErrBadSignature},
		{"timestamp changed", strings.Replace(h, "t=1767225600", "t=1767225601", 1), key, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"no timestamp", "v1=" + sig, key, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"signed timestamp", "t=+1767225600,v1=" + sig, key, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"timestamp twice", "t=1767225600,t=1767225600,v1=" + sig, key, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"no v1", "t=1767225600", key, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"v1 not hex", "t=1767225600,v1=" + strings.Repeat("g", 64), key, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"malformed", "garbage", key, string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"stale", h, key, string(body), at.Add(6 * time.Minute), 0, [][]byte{secret}, ErrStaleSignature},
		{"from the future", h, key, string(body), at.Add(-6 * time.Minute), 0, [][]byte{secret}, ErrStaleSignature},
		{"stale for a short tolerance", h, key, string(body), at.Add(31 * time.Second), 30 * time.Second, [][]byte{secret}, ErrStaleSignature},
		{"key changed (a replay under another id)", h, key[:35] + "1", string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"no key", h, "", string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"key with spaces around, as HTTP trims them", h, " " + key + "\t", string(body), at, 0, [][]byte{secret}, nil},
		{"key holding a newline", Sign(secret, at, "a\nb", body), "a\nb", string(body), at, 0, [][]byte{secret}, ErrBadSignature},
		{"boundary of key and body moved", Sign(secret, at, "m1", []byte(".5")), "m1.", "5", at, 0, [][]byte{secret}, ErrBadSignature},
		{"within a long tolerance", h, key, string(body), at.Add(time.Hour), 2 * time.Hour, [][]byte{secret}, nil},
	} {
		err := VerifySignature(c.header, c.key, []byte(c.body), c.now, c.tolerance, c.secrets...)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: VerifySignature = %v, want %v", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") && strings.Contains(err.Error(), string(secret)) {
			t.Errorf("%s: the error repeats the secret: %v", c.name, err)
		}
	}
}

// TestSignRequestSpelling: SignRequest's v2 is the HMAC-SHA256 of the
// string docs/sinks/webhook.md spells for other languages, over the named
// headers only, and VerifyRequest returns just those.
func TestSignRequestSpelling(t *testing.T) {
	secret := []byte("shared secret")
	body := []byte(`{"n":1}`)
	at := time.Unix(1767225600, 0)
	h := http.Header{}
	h.Set("X-Message-Id", "m1")
	h.Set("X-Message-Type", "order.created")
	h.Add("Traceparent", " 00-a ")
	h.Add("Traceparent", "00-b")
	h.Set("Authorization", "Bearer t")
	sig := SignRequest(secret, at, h, []string{"X-Message-Type", "x-message-id", "Traceparent", "traceparent"}, body)
	const hl = "traceparent;x-message-id;x-message-type"
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("v2\n1767225600\n" + hl + "\ntraceparent:00-a\ntraceparent:00-b\nx-message-id:m1\nx-message-type:order.created\n\n" + string(body)))
	if want := "t=1767225600,h=" + hl + ",v2=" + hex.EncodeToString(m.Sum(nil)); sig != want {
		t.Fatalf("SignRequest = %q, want %q", sig, want)
	}
	h.Set(SignatureHeader, sig)
	got, err := VerifyRequest(h, "m1", body, at, VerifyOptions{Secrets: [][]byte{secret}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got.Get("Authorization") != "" || len(got.Values("Traceparent")) != 2 {
		t.Errorf("VerifyRequest returned %v, want the three signed headers", got)
	}
}

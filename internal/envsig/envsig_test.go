package envsig

import (
	"bytes"
	"errors"
	"testing"
)

// TestVerifyAcceptsOnlyWhatAKeySignedForThePrefix: a signed envelope
// verifies with its key (or among others), and comes back as it was
// before signing; the wrong key, another prefix, a changed byte and no
// signature at all are refused.
func TestVerifyAcceptsOnlyWhatAKeySignedForThePrefix(t *testing.T) {
	key, other := []byte("0123456789abcdef0123"), []byte("another key of 20 by")
	body := []byte(`{"v":1,"id":"0190f5c2-6a8e-7cc0-9a4e-0e7d6c1b2a31","type":"order.created","payload":{"n":1}}`)
	signed := Sign(key, "walpost", body)
	if !bytes.HasPrefix(signed, []byte(`{"sig":"v1.`)) {
		t.Fatalf("signed envelope %s", signed)
	}
	got, err := Verify([][]byte{other, key}, "walpost", signed)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Verify = %s, %v; want the body back", got, err)
	}
	if _, err := Verify([][]byte{other}, "walpost", signed); !errors.Is(err, ErrBad) {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := Verify([][]byte{key}, "walpost.other", signed); !errors.Is(err, ErrBad) {
		t.Fatalf("other prefix: %v", err)
	}
	tampered := bytes.Replace(signed, []byte("order.created"), []byte("order.refunded"), 1)
	if _, err := Verify([][]byte{key}, "walpost", tampered); !errors.Is(err, ErrBad) {
		t.Fatalf("tampered type: %v", err)
	}
	if _, err := Verify([][]byte{key}, "walpost", body); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
	if b, sig := Split(body); sig != nil || !bytes.Equal(b, body) {
		t.Fatalf("Split of an unsigned envelope: %s %x", b, sig)
	}
}

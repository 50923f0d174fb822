package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
)

func TestClaimCheckResolve(t *testing.T) {
	payload := []byte(`{"big": true}`)
	sum := sha256.Sum256(payload)
	headers := map[string]string{
		HeaderClaimCheck:       "s3://b/k",
		HeaderClaimCheckSize:   strconv.Itoa(len(payload)),
		HeaderClaimCheckSHA256: hex.EncodeToString(sum[:]),
	}
	h := func(m map[string]string) func(string) string { return func(n string) string { return m[n] } }
	var asked string
	cc := WithClaimCheck(FetcherFunc(func(_ context.Context, ref string) ([]byte, error) { asked = ref; return payload, nil }))
	got, err := cc.Resolve(context.Background(), h(headers), nil)
	if err != nil || string(got) != string(payload) || asked != "s3://b/k" {
		t.Fatalf("got %q, %v (asked %q)", got, err, asked)
	}
	if got, err := cc.Resolve(context.Background(), h(nil), []byte("small")); err != nil || string(got) != "small" {
		t.Fatalf("a message without the header: %q, %v", got, err)
	}
	var none *ClaimCheck
	if got, err := none.Resolve(context.Background(), h(headers), []byte{}); err != nil || len(got) != 0 {
		t.Fatalf("a nil ClaimCheck: %q, %v", got, err)
	}
	for name, change := range map[string]func(m map[string]string){
		"size":    func(m map[string]string) { m[HeaderClaimCheckSize] = "3" },
		"sha256":  func(m map[string]string) { m[HeaderClaimCheckSHA256] = "00" },
		"no size": func(m map[string]string) { delete(m, HeaderClaimCheckSize) },
	} {
		m := map[string]string{}
		for k, v := range headers {
			m[k] = v
		}
		change(m)
		if _, err := cc.Resolve(context.Background(), h(m), nil); !errors.Is(err, ErrClaimCheck) {
			t.Errorf("%s changed: %v", name, err)
		}
	}
	failing := WithClaimCheck(FetcherFunc(func(context.Context, string) ([]byte, error) { return nil, errors.New("store down") }))
	if _, err := failing.Resolve(context.Background(), h(headers), nil); !errors.Is(err, ErrClaimCheck) {
		t.Fatalf("a failed fetch: %v", err)
	}
}

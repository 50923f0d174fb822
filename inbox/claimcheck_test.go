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
	cc := WithClaimCheck(FetcherFunc(func(_ context.Context, ref string) ([]byte, error) { asked = ref; return payload, nil }), "s3://b/")
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
	failing := WithClaimCheck(FetcherFunc(func(context.Context, string) ([]byte, error) { return nil, errors.New("store down") }), "s3://b/")
	if _, err := failing.Resolve(context.Background(), h(headers), nil); !errors.Is(err, ErrClaimCheck) {
		t.Fatalf("a failed fetch: %v", err)
	}
}

// TestClaimCheckRefusesReferencesOutsideItsScope: a reference outside the
// scope WithClaimCheck was given (or a Scoped fetcher accepts), or one
// with a . or .. segment, a query or a fragment, is refused with
// ErrClaimCheckScope and never fetched; without any scope every
// reference is.
func TestClaimCheckRefusesReferencesOutsideItsScope(t *testing.T) {
	payload := []byte(`{"big": true}`)
	sum := sha256.Sum256(payload)
	fetched := 0
	f := FetcherFunc(func(context.Context, string) ([]byte, error) { fetched++; return payload, nil })
	resolve := func(cc *ClaimCheck, ref string) error {
		h := map[string]string{HeaderClaimCheck: ref, HeaderClaimCheckSize: strconv.Itoa(len(payload)), HeaderClaimCheckSHA256: hex.EncodeToString(sum[:])}
		_, err := cc.Resolve(context.Background(), func(n string) string { return h[n] }, nil)
		return err
	}
	scoped := WithClaimCheck(f, "s3://outbox/walpost/")
	for _, ref := range []string{
		"s3://private/payroll.json",
		"s3://outbox/other/x",
		"s3://outbox-evil/walpost/x",
		"s3://outbox/walpost/../payroll.json",
		"s3://outbox/walpost/%2E%2E/payroll.json",
		"s3://outbox/walpost/x?versionId=1",
		"https://outbox/walpost/x",
	} {
		if err := resolve(scoped, ref); !errors.Is(err, ErrClaimCheckScope) || !errors.Is(err, ErrClaimCheck) {
			t.Errorf("%s: %v, want ErrClaimCheckScope", ref, err)
		}
	}
	if err := resolve(WithClaimCheck(f, "s3://outbox"), "s3://outbox-evil/walpost/x"); !errors.Is(err, ErrClaimCheckScope) {
		t.Errorf("a bucket-only prefix matched another bucket: %v", err)
	}
	if err := resolve(WithClaimCheck(f), "s3://outbox/walpost/x"); !errors.Is(err, ErrClaimCheckScope) {
		t.Errorf("no scope: %v, want ErrClaimCheckScope", err)
	}
	if fetched != 0 {
		t.Fatalf("%d refused references were fetched", fetched)
	}
	if err := resolve(scoped, "s3://outbox/walpost/slot/sink/id"); err != nil || fetched != 1 {
		t.Fatalf("a reference in scope: %v (fetched %d)", err, fetched)
	}
	only := WithClaimCheck(scopedFetcher{f})
	if err := resolve(only, "s3://private/x"); !errors.Is(err, ErrClaimCheckScope) || fetched != 1 {
		t.Fatalf("a Scoped fetcher's refusal: %v (fetched %d)", err, fetched)
	}
	if err := resolve(only, "s3://mine/x"); err != nil || fetched != 2 {
		t.Fatalf("a Scoped fetcher's own: %v (fetched %d)", err, fetched)
	}
}

// scopedFetcher reads s3://mine/ only.
type scopedFetcher struct{ Fetcher }

func (scopedFetcher) CheckScope(ref string) error {
	if len(ref) < len("s3://mine/") || ref[:len("s3://mine/")] != "s3://mine/" {
		return errors.New("not mine")
	}
	return nil
}

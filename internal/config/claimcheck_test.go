package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const azCS = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=S3cretAccountKey0123456789==;EndpointSuffix=core.windows.net"

// TestClaimCheckGlobalAppliesToEverySinkUnlessOverridden: relay.claim_check
// becomes each sink's, with its defaults; a sink's own claim_check
// replaces it, and store: none turns it off for that sink.
func TestClaimCheckGlobalAppliesToEverySinkUnlessOverridden(t *testing.T) {
	y := `
postgres: {url: postgres://u@h/db, slot: s1}
relay:
  claim_check: {store: azblob, container: big, connection_string: "` + azCS + `"}
sinks:
  - {name: a, kind: stdout}
  - {name: b, kind: stdout, claim_check: {store: s3, bucket: bk, prefix: "x/", threshold_bytes: 1000}}
  - {name: c, kind: stdout, claim_check: {store: none}}
`
	c, err := Parse([]byte(y), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, b, cc := c.Sinks[0].ClaimCheck, c.Sinks[1].ClaimCheck, c.Sinks[2].ClaimCheck
	if a == nil || a.Store != StoreAzblob || a.Container != "big" || *a.Prefix != "walpost/" || a.Slot != "s1" || a.Timeout.D() != time.Minute || a.Field != "relay.claim_check" {
		t.Fatalf("sink a: %+v", a)
	}
	if b == nil || b.Store != StoreS3 || b.Bucket != "bk" || *b.Prefix != "x/" || b.ThresholdBytes != 1000 || b.Slot != "s1" || b.Field != "sinks[1].claim_check" {
		t.Fatalf("sink b: %+v", b)
	}
	if cc != nil {
		t.Fatalf("sink c: store none should turn it off: %+v", cc)
	}
	c, err = Parse([]byte(minimal), env(nil))
	if err != nil || c.Sinks[0].ClaimCheck != nil {
		t.Fatalf("claim check on without relay.claim_check: %v %+v", err, c.Sinks[0].ClaimCheck)
	}
}

func TestClaimCheckErrorsNameTheField(t *testing.T) {
	for y, want := range map[string]string{
		"relay:\n  claim_check: {}\n":                                                                                   "relay.claim_check.store: empty (set azblob or s3)",
		"relay:\n  claim_check: {store: gcs}\n":                                                                         `relay.claim_check.store: "gcs" is not azblob or s3`,
		"relay:\n  claim_check: {store: none}\n":                                                                        "relay.claim_check.store: none is for a sink's own claim_check",
		"relay:\n  claim_check: {store: azblob, connection_string: x}\n":                                                "relay.claim_check.container: empty",
		"relay:\n  claim_check: {store: azblob, container: c}\n":                                                        "relay.claim_check.connection_string: neither connection_string nor account_url",
		"relay:\n  claim_check: {store: azblob, container: c, connection_string: abc}\n":                                "relay.claim_check.connection_string: not a storage connection string",
		"relay:\n  claim_check: {store: azblob, container: c, account_url: 'https://a.blob.core.windows.net/?sig=x'}\n": "relay.claim_check.account_url: has a query",
		"relay:\n  claim_check: {store: azblob, container: c, account_url: 'https://a', bucket: b}\n":                   "relay.claim_check.store: azblob does not take bucket",
		"relay:\n  claim_check: {store: s3}\n":                                                                          "relay.claim_check.bucket: empty",
		"relay:\n  claim_check: {store: s3, bucket: b, endpoint: 'localhost:9000'}\n":                                   "relay.claim_check.endpoint:",
		"relay:\n  claim_check: {store: s3, bucket: b, container: c}\n":                                                 "relay.claim_check.store: s3 does not take container",
		"relay:\n  claim_check: {store: s3, bucket: b, prefix: /abs}\n":                                                 "relay.claim_check.prefix:",
		"relay:\n  claim_check: {store: s3, bucket: b, threshold_bytes: -1}\n":                                          "relay.claim_check.threshold_bytes: -1 is negative",
		"relay:\n  claim_check: {store: s3, bucket: b, timeout: 1ms}\n":                                                 "relay.claim_check.timeout: 1ms is outside 1s..30m",
		"relay:\n  claim_check: {store: s3, bucket: b, colour: red}\n":                                                  "relay.claim_check.colour",
	} {
		_, err := Parse([]byte(minimal+y), env(nil))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", y, err, want)
		}
	}
	_, err := Parse([]byte("postgres: {url: postgres://u@h/db}\nsinks:\n  - {name: a, kind: stdout, claim_check: {store: s3}}\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "sinks[0].claim_check.bucket: empty") {
		t.Errorf("a sink's claim_check: %v", err)
	}
}

// TestClaimCheckConnectionStringIsSecret: the storage connection string
// and its AccountKey, in relay.claim_check or a sink's claim_check, are
// among the secrets the logs redact, and a bad one is not quoted.
func TestClaimCheckConnectionStringIsSecret(t *testing.T) {
	for _, y := range []string{
		"postgres: {url: postgres://u@h/db}\nrelay:\n  claim_check: {store: azblob, container: c, connection_string: \"" + azCS + "\"}\nsinks: [{name: a, kind: stdout}]\n",
		"postgres: {url: postgres://u@h/db}\nsinks:\n  - {name: a, kind: stdout, claim_check: {store: azblob, container: c, connection_string: \"" + azCS + "\"}}\n",
	} {
		c, err := Parse([]byte(y), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		s := c.Secrets()
		if !slices.Contains(s, azCS) || !slices.Contains(s, "S3cretAccountKey0123456789==") {
			t.Errorf("secrets %q miss the connection string or its AccountKey", s)
		}
	}
	_, err := Parse([]byte(minimal+"relay:\n  claim_check: {store: azblob, container: c, connection_string: \"AccountKey=S3cretAccountKey0123456789==\"}\n"), env(nil))
	if err == nil || strings.Contains(err.Error(), "S3cret") {
		t.Fatalf("a bad connection string: %v", err)
	}
}

package inboxtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walpost/walpost/inbox"
	"github.com/walpost/walpost/internal/pgtest"
)

// Claim is a claim-checked payload for the loops' tests: Headers are what
// walpost's claim check sends in place of the body, Fetcher serves the
// payload, and BadHeaders name an object whose SHA-256 does not match.
type Claim struct {
	Payload    []byte
	Headers    map[string]string
	BadHeaders map[string]string
	Fetcher    inbox.Fetcher
}

// NewClaim returns a Claim of a payload of n bytes.
func NewClaim(n int) Claim {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	sum := sha256.Sum256(p)
	objects := map[string][]byte{"mem://good": p, "mem://bad": append([]byte("x"), p[1:]...)}
	h := func(ref string) map[string]string {
		return map[string]string{inbox.HeaderClaimCheck: ref, inbox.HeaderClaimCheckSize: strconv.Itoa(n), inbox.HeaderClaimCheckSHA256: hex.EncodeToString(sum[:])}
	}
	return Claim{Payload: p, Headers: h("mem://good"), BadHeaders: h("mem://bad"),
		Fetcher: memScoped{inbox.FetcherFunc(func(_ context.Context, ref string) ([]byte, error) {
			if b, ok := objects[ref]; ok {
				return b, nil
			}
			return nil, fmt.Errorf("no object %s", ref)
		})}}
}

// memScoped is a Fetcher of mem:// references (inbox.Scoped).
type memScoped struct{ inbox.Fetcher }

// CheckScope accepts mem:// references.
func (memScoped) CheckScope(ref string) error { return checkMem(ref) }

// checkMem returns nil for a mem:// reference, else an error wrapping
// inbox.ErrClaimCheckScope.
func checkMem(ref string) error {
	if !strings.HasPrefix(ref, "mem://") {
		return fmt.Errorf("%w: %s is not mem://", inbox.ErrClaimCheckScope, ref)
	}
	return nil
}

// MemStore is a claim check store in memory for the loops' tests: Put
// (claimcheck.Store) keeps objects as mem://NAME, Fetch (inbox.Fetcher)
// returns them. It is safe for concurrent use.
type MemStore struct {
	mu      sync.Mutex
	objects map[string][]byte
}

// Put stores body as mem://name.
func (m *MemStore) Put(_ context.Context, name string, body []byte, _ string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.objects == nil {
		m.objects = map[string][]byte{}
	}
	m.objects["mem://"+name] = bytes.Clone(body)
	return "mem://" + name, nil
}

// CheckScope accepts mem:// references (inbox.Scoped).
func (m *MemStore) CheckScope(ref string) error { return checkMem(ref) }

// Fetch returns the object at ref.
func (m *MemStore) Fetch(_ context.Context, ref string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[ref]
	if !ok {
		return nil, fmt.Errorf("no object %s", ref)
	}
	return b, nil
}

// ClaimResults collects what a loop's effect got, by message id, and the
// claim-check errors its OnError saw, for the loops' claim-check tests.
// It is safe for concurrent use.
type ClaimResults struct {
	mu   sync.Mutex
	got  map[string][]byte
	errs int
}

// Got records the payload the effect got for message id.
func (r *ClaimResults) Got(id string, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string][]byte{}
	}
	r.got[id] = payload
}

// OnError counts err when it is a claim-check error (inbox.ErrClaimCheck).
func (r *ClaimResults) OnError(err error) {
	if errors.Is(err, inbox.ErrClaimCheck) {
		r.mu.Lock()
		r.errs++
		r.mu.Unlock()
	}
}

// Check waits until the message "good" reached the effect and at least
// minErrs claim-check errors were seen (the message "bad", whose object
// does not match), then checks that "good" got claim's payload and "bad"
// never reached the effect.
func (r *ClaimResults) Check(t testing.TB, claim Claim, minErrs int) {
	t.Helper()
	if !pgtest.WaitFor(30*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.got["good"] != nil && r.errs >= minErrs
	}) {
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("the good message's effect ran: %v; claim check errors: %d", r.got["good"] != nil, r.errs)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if string(r.got["good"]) != string(claim.Payload) {
		t.Fatalf("the effect got %d bytes, not the payload", len(r.got["good"]))
	}
	if _, ran := r.got["bad"]; ran {
		t.Fatal("the effect ran for a message whose object does not match")
	}
}

package inboxtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"

	"github.com/walpost/walpost/inbox"
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
		Fetcher: inbox.FetcherFunc(func(_ context.Context, ref string) ([]byte, error) {
			if b, ok := objects[ref]; ok {
				return b, nil
			}
			return nil, fmt.Errorf("no object %s", ref)
		})}
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

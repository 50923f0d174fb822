package inbox_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/walpost/walpost/inbox"
)

// A receive loop resolves claim-checked messages with
// Options.ClaimCheck: inbox.WithClaimCheck(claimazblob.New(client,
// container, "walpost/")) or claims3.New(client, bucket, "walpost/"),
// which read that container or bucket only. Resolve is what the loops
// call; this fetcher serves one object from memory, and the scope given
// to WithClaimCheck is what it may read.
func ExampleWithClaimCheck() {
	payload := []byte(`{"scan": "…1 MiB…"}`)
	sum := sha256.Sum256(payload)
	headers := map[string]string{ // as walpost's claim check sends them
		inbox.HeaderClaimCheck:       "https://acct.blob.core.windows.net/outbox-payloads/walpost%2Fwalpost_outbox%2Fbus%2F0193a4c2",
		inbox.HeaderClaimCheckSize:   strconv.Itoa(len(payload)),
		inbox.HeaderClaimCheckSHA256: hex.EncodeToString(sum[:]),
	}
	cc := inbox.WithClaimCheck(inbox.FetcherFunc(func(ctx context.Context, ref string) ([]byte, error) {
		return payload, nil // claimazblob.Fetcher downloads the blob at ref
	}), "https://acct.blob.core.windows.net/outbox-payloads/")
	body, err := cc.Resolve(context.Background(), func(name string) string { return headers[name] }, []byte{})
	fmt.Println(string(body), err)
	// Output: {"scan": "…1 MiB…"} <nil>
}

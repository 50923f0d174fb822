//go:build walpost_no_aws

package claimcheck

import (
	"fmt"

	"github.com/walpost/walpost/internal/config"
)

// s3StoreOf refuses the S3 store: this build leaves the AWS SDK out
// (docs/operations.md, "Bounded memory").
func s3StoreOf(cc *config.ClaimCheck) (Store, error) {
	return nil, fmt.Errorf("%s.store: s3 is not in this build of cdc (built with -tags walpost_no_aws); use azblob, or a build without that tag, such as the default one", cc.Field)
}

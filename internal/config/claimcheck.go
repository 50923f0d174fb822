package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ClaimCheck is relay.claim_check, or a sink's own claim_check that
// replaces it for that sink: a payload too large for the sink is stored
// in Azure Blob Storage or S3 first, and the message carries a reference
// to it instead of the body (docs/claim-check.md). Off when neither is
// set.
type ClaimCheck struct {
	// Store is where payloads go: "azblob" (Azure Blob Storage) or "s3".
	// A sink's own claim_check with store "none" turns relay.claim_check
	// off for that sink.
	Store string `yaml:"store"`
	// Container is the blob container (azblob; required). walpost does
	// not create it.
	Container string `yaml:"container"`
	// Bucket is the S3 bucket (s3; required). walpost does not create it.
	Bucket string `yaml:"bucket"`
	// Prefix starts every object name (default "walpost/"); the rest is
	// <slot>/<sink>/<message id>.
	Prefix *string `yaml:"prefix"`
	// ThresholdBytes: a payload larger than this is stored. 0 (the
	// default) takes the sink's max_message_bytes less 16 KiB for the
	// message's id, type, headers and framing; sinks that state no limit
	// need it set.
	ThresholdBytes int `yaml:"threshold_bytes"`
	// ConnectionString authenticates to Azure Blob Storage with the
	// account key ("DefaultEndpointsProtocol=https;AccountName=…;
	// AccountKey=…;EndpointSuffix=core.windows.net", or Azurite's). It is
	// a secret: never logged. Exactly one of ConnectionString and
	// AccountURL is set for azblob.
	ConnectionString string `yaml:"connection_string"`
	// AccountURL is the blob endpoint (https://ACCOUNT.blob.core.windows.net);
	// the relay then authenticates with Azure AD through azidentity's
	// DefaultAzureCredential (needs Storage Blob Data Contributor on the
	// container).
	AccountURL string `yaml:"account_url"`
	// Region is the bucket's AWS region (s3); empty takes it from the
	// default chain (AWS_REGION, the shared config's profile).
	Region string `yaml:"region"`
	// Endpoint overrides the S3 endpoint URL (s3): a VPC endpoint, MinIO,
	// the tests' stand-in. Credentials always come from the AWS default
	// chain (environment, shared files, the instance's or task's role).
	Endpoint string `yaml:"endpoint"`
	// PathStyle addresses the bucket in the path (endpoint/bucket/key)
	// instead of the host name (s3), as MinIO and most stand-ins need.
	PathStyle bool `yaml:"path_style"`
	// Timeout bounds one upload, the SDK's retries included (default
	// 1m). A failed or timed-out upload is retried like a failed publish.
	Timeout Duration `yaml:"timeout"`

	// Slot is postgres.slot, part of every object name (set by
	// SetDefaults).
	Slot string `yaml:"-"`
	// Field is where the section is configured ("relay.claim_check" or
	// "sinks[1].claim_check"), for error messages.
	Field string `yaml:"-"`
}

// Claim check stores.
const (
	StoreAzblob = "azblob"
	StoreS3     = "s3"
	StoreNone   = "none"
)

// defaultClaimPrefix starts object names when prefix is not set.
const defaultClaimPrefix = "walpost/"

// setClaimCheckDefaults gives each sink its effective claim check: its
// own claim_check, else a copy of relay.claim_check; nil when neither is
// set or its own says store: none.
func (c *Config) setClaimCheckDefaults() {
	fill := func(cc *ClaimCheck, field string) {
		cc.Field = field
		cc.Slot = c.Postgres.Slot
		if cc.Prefix == nil {
			p := defaultClaimPrefix
			cc.Prefix = &p
		}
		if cc.Timeout == 0 {
			cc.Timeout = Duration(time.Minute)
		}
	}
	if g := c.Relay.ClaimCheck; g != nil {
		fill(g, "relay.claim_check")
	}
	for i := range c.Sinks {
		s := &c.Sinks[i]
		if s.ClaimCheck == nil && c.Relay.ClaimCheck != nil && c.Relay.ClaimCheck.Store != StoreNone {
			cp := *c.Relay.ClaimCheck
			s.ClaimCheck = &cp
			continue
		}
		switch {
		case s.ClaimCheck != nil && s.ClaimCheck.Store == StoreNone:
			s.ClaimCheck = nil
		case s.ClaimCheck != nil:
			fill(s.ClaimCheck, fmt.Sprintf("sinks[%d].claim_check", i))
		}
	}
}

// validateClaimCheck checks relay.claim_check and each sink's own.
func (c *Config) validateClaimCheck() error {
	if g := c.Relay.ClaimCheck; g != nil && !c.UnresolvedUnder("relay.claim_check") { // unresolved: LoadFor
		if err := c.checkClaimCheck(g); err != nil {
			return err
		}
	}
	for i := range c.Sinks {
		if cc := c.Sinks[i].ClaimCheck; cc != nil && cc.Field != "relay.claim_check" && !c.UnresolvedUnder(fmt.Sprintf("sinks[%d]", i)) {
			if err := c.checkClaimCheck(cc); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkClaimCheck checks one claim_check section, fields in struct order.
func (c *Config) checkClaimCheck(cc *ClaimCheck) error {
	at := cc.Field + "."
	switch cc.Store {
	case StoreAzblob, StoreS3:
	case StoreNone:
		if cc.Field == "relay.claim_check" {
			return c.fail(at+"store", "none is for a sink's own claim_check (to turn relay.claim_check off for it); remove relay.claim_check instead")
		}
		return nil
	case "":
		return c.fail(at+"store", "empty (set azblob or s3)")
	default:
		return c.fail(at+"store", "%s is not azblob or s3", c.q(at+"store", cc.Store))
	}
	if cc.Store == StoreAzblob {
		switch {
		case cc.Container == "":
			return c.fail(at+"container", "empty (name the blob container payloads go to; walpost does not create it)")
		case cc.Bucket != "" || cc.Region != "" || cc.Endpoint != "" || cc.PathStyle:
			return c.fail(at+"store", "azblob does not take bucket, region, endpoint or path_style (they are s3's)")
		case cc.ConnectionString == "" && cc.AccountURL == "":
			return c.fail(at+"connection_string", "neither connection_string nor account_url is set (set connection_string to use the account key, "+
				"or account_url, e.g. https://ACCOUNT.blob.core.windows.net, to use Azure AD)")
		case cc.ConnectionString != "" && cc.AccountURL != "":
			return c.fail(at+"connection_string", "both connection_string and account_url are set (set one)")
		case cc.ConnectionString != "" && !strings.Contains(strings.ToLower(cc.ConnectionString), "accountname="):
			return c.fail(at+"connection_string", "not a storage connection string: it has no AccountName= (copy it from the storage account's Access keys)")
		case cc.AccountURL != "":
			u, err := url.Parse(cc.AccountURL)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return c.fail(at+"account_url", "%s is not an http(s) URL of a blob endpoint (https://ACCOUNT.blob.core.windows.net)", c.q(at+"account_url", cc.AccountURL))
			}
			if u.RawQuery != "" || u.User != nil {
				return c.fail(at+"account_url", "has a query or user info: a SAS token or key in the URL is not supported (use connection_string, or Azure AD with the bare URL)")
			}
		}
	} else {
		switch {
		case cc.Bucket == "":
			return c.fail(at+"bucket", "empty (name the S3 bucket payloads go to; walpost does not create it)")
		case cc.Container != "" || cc.ConnectionString != "" || cc.AccountURL != "":
			return c.fail(at+"store", "s3 does not take container, connection_string or account_url (they are azblob's; S3 credentials come from the AWS default chain)")
		case cc.Endpoint != "":
			u, err := url.Parse(cc.Endpoint)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return c.fail(at+"endpoint", "%s is not an http(s) URL", c.q(at+"endpoint", cc.Endpoint))
			}
		}
	}
	if p := *cc.Prefix; strings.HasPrefix(p, "/") || strings.Contains(p, "..") || len(p) > 512 {
		return c.fail(at+"prefix", "%s: an object name prefix must not start with / or hold .. (e.g. walpost/)", c.q(at+"prefix", p))
	}
	if cc.ThresholdBytes < 0 {
		return c.fail(at+"threshold_bytes", "%d is negative (0 takes the sink's max_message_bytes less 16 KiB)", cc.ThresholdBytes)
	}
	if d := cc.Timeout.D(); d < time.Second || d > 30*time.Minute {
		return c.fail(at+"timeout", "%v is outside 1s..30m", d)
	}
	return nil
}

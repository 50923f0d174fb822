package inboxsqs

import (
	"os"
	"testing"

	"github.com/walpost/walpost/internal/pgtest"
)

// TestMain starts the throwaway PostgreSQL cluster the integration tests
// share (pgtest.Main; WALPOST_TEST_DATABASE_URL names a server instead),
// and gives the SDK's default chain credentials and a region.
func TestMain(m *testing.M) {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "walpost-test-secret", "AWS_REGION": "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.DevNull, "AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	os.Exit(pgtest.Main(m))
}

package inboxpubsub

import (
	"os"
	"testing"

	"github.com/walpost/walpost/internal/pgtest"
)

// TestMain starts the throwaway PostgreSQL cluster the integration tests
// share (pgtest.Main; WALPOST_TEST_DATABASE_URL names a server instead).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

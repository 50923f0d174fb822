package pgtest

import (
	"context"
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestIntegrationClusterHasLogicalWAL(t *testing.T) {
	conn := Connect(t, URL(t))
	var level string
	if err := conn.QueryRow(context.Background(), "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level = %q, want logical", level)
	}
}

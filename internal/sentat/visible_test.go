package sentat

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/walpost/walpost/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestIntegrationVisibleWidensXidsWithTheSnapshotsEpoch: the 32-bit xid
// pgoutput's Begin carries is widened with the epoch of the snapshot's
// xmax, also across a wraparound (an xid from before it, with the next
// xid already in the next epoch), and a transaction is visible exactly
// when the snapshot no longer lists it as running.
func TestIntegrationVisibleWidensXidsWithTheSnapshotsEpoch(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Connect(t, pgtest.URL(t))
	// Epoch 1: xmin 4294967396 (1:100), xmax 4294967410 (1:114), running
	// 4294967398 (1:102) and 4294967290 (0:4294967290 is below xmin: done).
	const snap = `'4294967396:4294967410:4294967398'::pg_snapshot`
	for _, c := range []struct {
		xid  uint32
		want bool
	}{
		{4294967290, true}, // epoch 0, before the wraparound, below xmin
		{2, true},          // frozen
		{100, true},        // 1:100 = xmin, not listed
		{102, false},       // 1:102 running
		{103, true},        // 1:103 committed
		{113, true},        // 1:113, just below xmax
		{114, false},       // 1:114 = xmax: not yet assigned
	} {
		var got []bool
		if err := conn.QueryRow(ctx, visibleQuery(snap), []int64{int64(c.xid)}).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("xid %d: visible %v, want %v", c.xid, got, c.want)
		}
	}

	// A real transaction: not visible while it runs, visible once it
	// committed; the answers keep the order of the question.
	d := &pgDB{url: pgtest.URL(t)}
	defer d.Close()
	tx, err := pgtest.Connect(t, pgtest.URL(t)).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var x8 string
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&x8); err != nil {
		t.Fatal(err)
	}
	x64, _ := strconv.ParseUint(x8, 10, 64)
	xid := uint32(x64)
	vis, err := d.Visible(ctx, []uint32{xid - 1, xid, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(vis) != 3 || !vis[0] || vis[1] || !vis[2] {
		t.Fatalf("while it runs: %v, want [true false true]", vis)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if vis, err = d.Visible(ctx, []uint32{xid}); err != nil || len(vis) != 1 || !vis[0] {
		t.Fatalf("after its commit: %v %v, want [true]", vis, err)
	}
	if vis, err = d.Visible(ctx, nil); err != nil || len(vis) != 0 {
		t.Fatalf("no xids: %v %v", vis, err)
	}
}

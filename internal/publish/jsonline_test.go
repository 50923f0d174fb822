package publish

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestAppendLSNWritesWhatLSNStringWrites(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xf, 0x10, 0x16B3748, 0xffffffff, 0x1_00000000, 0x16_B374D848, ^uint64(0)} {
		if got, want := string(appendLSN(nil, v)), pglogrepl.LSN(v).String(); got != want {
			t.Errorf("appendLSN(%#x) = %q, want %q", v, got, want)
		}
	}
}

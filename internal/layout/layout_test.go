package layout

import "testing"

func TestDefaultTableIsTheDefaultLayoutWithOrWithoutCreatedAtAsTime(t *testing.T) {
	withTime := Default
	withTime[Time] = DefaultTime
	otherTime, sentAt, renamed := Default, Default, Default
	otherTime[Time] = "occurred_at"
	sentAt[SentAt] = "sent"
	renamed[Payload] = "body"
	for name, c := range map[string]Columns{"Default": Default, "time: created_at": withTime} {
		if !c.DefaultTable() {
			t.Errorf("%s: DefaultTable = false", name)
		}
	}
	for name, c := range map[string]Columns{"time: occurred_at": otherTime, "sent_at: sent": sentAt, "payload: body": renamed} {
		if c.DefaultTable() {
			t.Errorf("%s: DefaultTable = true", name)
		}
	}
}

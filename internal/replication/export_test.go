package replication

// BehindStarts reports how often the stream found itself behind the
// server (reading a backlog).
func (s *Stream) BehindStarts() int64 { return s.behindStarts.Load() }

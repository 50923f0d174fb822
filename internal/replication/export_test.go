package replication

// CoalesceStarts reports how often the stream began coalescing reads.
func (s *Stream) CoalesceStarts() int64 { return s.coalesceStarts.Load() }

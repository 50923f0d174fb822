package checkpoint

// Len is the number of entries held.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue) - t.head
}

// idleUnderLock is what Idle reports, computed under the lock from the
// queue itself.
func (t *Tracker) idleUnderLock() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open == nil && t.head == len(t.queue)
}

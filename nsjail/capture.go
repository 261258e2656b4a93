package nsjail

import "sync"

// boundedBuffer keeps the first limit bytes written to it and counts the
// rest, so a run that floods its output cannot exhaust memory and is never
// blocked on a full pipe.
type boundedBuffer struct {
	mu        sync.Mutex
	buf       []byte
	limit     int64
	truncated bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - int64(len(b.buf))
	if int64(len(p)) > room {
		b.truncated = true
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *boundedBuffer) result() (*string, *bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, t := string(b.buf), b.truncated
	return &s, &t
}

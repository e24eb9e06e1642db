package testutil

import (
	"bytes"
	"sync"
)

// LogBuffer is a log sink that the code under test writes from its own
// goroutines while the test reads it: an io.Writer for a slog handler or
// promslog, safe for concurrent use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

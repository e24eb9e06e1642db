package testutil

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Lines logged from several goroutines all arrive, whole (run with -race).
func TestLogBufferTakesConcurrentWrites(t *testing.T) {
	var buf LogBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				logger.Info("line", "g", g, "i", i)
				_ = buf.String()
			}
		})
	}
	wg.Wait()
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
	for g := range 8 {
		if !strings.Contains(out, fmt.Sprintf("msg=line g=%d i=49\n", g)) {
			t.Errorf("goroutine %d's last line is missing", g)
		}
	}
}

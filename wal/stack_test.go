package wal

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/compression"
)

// Scrape loops that commit must not each keep snappy's 32 KiB stack frame:
// the writer goroutine does the compressing. Each committing goroutine here
// stays parked afterwards, as a scrape loop does between scrapes, and the
// stacks they hold are compared with what a 64 KiB stack per goroutine
// would be. (The 32 KiB frame is snappy's amd64 and arm64 assembly; on other
// architectures the test still holds, it just would not catch a regression.)
func TestCommittersKeepSmallStacks(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "wal"), Options{Compression: compression.Snappy}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// No GC: it would shrink parked stacks and hide what they grew to.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	const loops = 100
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	release := make(chan struct{})
	var committed, done sync.WaitGroup
	committed.Add(loops)
	done.Add(loops)
	ts := time.Now().UnixMilli()
	for i := range loops {
		go func() {
			defer done.Done()
			a := s.AppenderV2(context.Background())
			for _, ls := range makeSeries(200, fmt.Sprintf("loop_%d", i)) {
				if _, err := a.Append(0, ls, 0, ts, 1, nil, nil, storage.AOptions{}); err != nil {
					t.Error(err)
				}
			}
			if err := a.Commit(); err != nil {
				t.Error(err)
			}
			committed.Done()
			<-release
		}()
	}
	committed.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	close(release)
	done.Wait()

	perLoop := (int64(after.StackInuse) - int64(before.StackInuse)) / loops
	t.Logf("stack per committing goroutine: %d KiB", perLoop>>10)
	if perLoop >= 48<<10 {
		t.Errorf("each committing goroutine keeps %d KiB of stack; snappy's frame (32 KiB) is on the scrape loops' stacks again", perLoop>>10)
	}
}

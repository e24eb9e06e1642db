package remotewrite

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/shoal-dev/shoal/wal"
)

// A repair of the real WAL cuts a middle segment and reuses the segment
// numbers after it for new data. A queue whose saved position lies in a
// reused segment must re-read from the cut instead of skipping what is new.
func TestQueueResumesAfterWALRepairReusedSegments(t *testing.T) {
	walDir, progDir := dirs(t)
	rcv := newReceiver(t)
	cfg := loadConfig(t, oneQueue, rcv.srv.URL)
	opts := wal.Options{SegmentSize: 64 << 10, Compression: compression.None}

	series := make([]labels.Labels, 50)
	for i := range series {
		series[i] = labels.FromStrings("__name__", "m", "i", fmt.Sprint(i))
	}
	ts := time.Now().UnixMilli()
	appendRound := func(s *wal.Storage) {
		t.Helper()
		app := s.AppenderV2(t.Context())
		for _, ls := range series {
			if _, err := app.Append(0, ls, 0, ts, float64(ts), nil, nil, storage.AOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		ts++
	}
	open := func() *wal.Storage {
		t.Helper()
		s, err := wal.Open(walDir, opts, nil, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Fill segments 0..3 and send all of it: the saved position is in segment 3.
	s := open()
	rounds := 0
	for {
		appendRound(s)
		rounds++
		if _, last, _ := wlog.Segments(walDir); last >= 3 {
			break
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tm := startManager(t, walDir, progDir, cfg)
	sent := rounds * len(series)
	waitFor(t, "the first rounds delivered", func() bool { d, _ := rcv.count(); return d == sent })
	tm.shutdown(t, 5*time.Second)
	progressPath := filepath.Join(progDir, "q.json")
	if pf := readProgressFile(t, progressPath); pf.Segment < 3 {
		t.Fatalf("saved position %d/%d, want it in segment 3", pf.Segment, pf.Offset)
	}

	// Damage segment 2 in its middle: the repair keeps what is before the
	// damage, deletes segment 3 and writes on at a new segment 3, where the
	// saved offset now points into new data.
	f, err := os.OpenFile(wlog.SegmentName(walDir, 2), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if _, err := f.WriteAt([]byte("garbage garbage garbage garbage"), st.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = open()
	firstNew := ts
	for range 20 {
		appendRound(s)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r, _ := wal.ReadRepairs(walDir); r.Generation != 1 || r.Segment != 2 {
		t.Fatalf("repair record = %+v, want generation 1 at segment 2", r)
	}
	if _, last, _ := wlog.Segments(walDir); last != 3 {
		t.Fatalf("after the repair the last segment is %d, want the reused number 3", last)
	}

	tm = startManager(t, walDir, progDir, cfg)
	want := int(ts - firstNew)
	waitFor(t, "every sample appended after the repair", func() bool {
		for _, ls := range series {
			for x := firstNew; x < ts; x++ {
				if rcv.has(withCluster(ls), x) == 0 {
					return false
				}
			}
		}
		return true
	})
	tm.shutdown(t, 5*time.Second)
	total, _ := rcv.count()
	if total < sent+want*len(series) {
		t.Fatalf("receiver has %d distinct samples, want at least %d", total, sent+want*len(series))
	}
	pf := readProgressFile(t, progressPath)
	if pf.WALRepairs != 1 {
		t.Errorf("progress file records repair generation %d, want 1", pf.WALRepairs)
	}
}

// withCluster is the series as the receiver sees it: with oneQueue's external label.
func withCluster(ls labels.Labels) string {
	b := labels.NewBuilder(ls)
	b.Set("cluster", "c1")
	return b.Labels().String()
}

package wal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"
)

// smallTmpfs mounts a tmpfs of the given size (mount(8) syntax, e.g. "2m")
// on a fresh directory until the test ends. Without the privilege to mount
// it skips, except in CI, where it fails.
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mounting a tmpfs (this test needs root): %v: %s", err, out)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillDisk writes a file until the file system is full and returns a
// function that frees the space again.
func fillDisk(t *testing.T, dir string) (free func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	f.Close()
	return func() {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}

// fillInodes creates empty files until the file system has no inode left
// (so the WAL cannot start a new segment although there is space) and
// returns a function that removes them.
func fillInodes(t *testing.T, dir string) (free func()) {
	t.Helper()
	fill := filepath.Join(dir, "inodes")
	if err := os.Mkdir(fill, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(fill, strconv.Itoa(i)))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("using up the inodes: %v", err)
			}
			break
		}
		f.Close()
	}
	return func() {
		if err := os.RemoveAll(fill); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDiskFullRefusesAppendsAndRecovers runs the WAL on a 2 MiB tmpfs that
// fills up while appending (no space left for the page being written, or
// no inode left for the next segment): the failed write and every commit after it are
// refused (counted, shoal_wal_writable 0) without touching the log; once the
// space is back the next commit reopens the WAL, cutting the batch torn by the
// failure, and appends go on. Reopened from disk, the WAL replays with no
// corruption, and holds every committed sample once and in order.
func TestDiskFullRefusesAppendsAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		exhaust func(*testing.T, string) func()
	}{
		{"no space", fillDisk},
		{"no inode for the next segment", fillInodes},
	} {
		t.Run(tc.name, func(t *testing.T) { testDiskFull(t, tc.exhaust) })
	}
}

func testDiskFull(t *testing.T, exhaust func(*testing.T, string) func()) {
	mnt := smallTmpfs(t, "2m,nr_inodes=400")
	dir := filepath.Join(mnt, "wal")
	// Uncompressed, with batches of several pages, so that the failure
	// tears a record across a page boundary.
	// A reader that needs every segment keeps truncation from deleting any.
	opts := Options{SegmentSize: 16 * pageSize, Compression: compression.None, PendingSegment: func() (int, bool) { return 0, true }}
	w := openTest(t, dir, opts, nil)
	series := makeSeries(2000, "disk_full_test")

	committed := map[int64]bool{} // timestamps of the batches that committed
	commit := func(ts int64) error {
		app := w.AppenderV2(t.Context())
		for _, ls := range series {
			if _, err := app.Append(0, ls, 0, ts, float64(ts), nil, nil, storage.AOptions{}); err != nil {
				t.Fatalf("append: %v", err)
			}
		}
		err := app.Commit()
		if err == nil {
			committed[ts] = true
		}
		return err
	}
	ts := w.clock.Ms()
	next := func() int64 { ts += 1000; w.clock.Advance(time.Second); return ts }
	for range 5 {
		if err := commit(next()); err != nil {
			t.Fatalf("commit before the disk is full: %v", err)
		}
	}

	free := exhaust(t, mnt)
	var firstErr error
	for range 200 {
		if err := commit(next()); err != nil {
			firstErr = err
			break
		}
	}
	if !errors.Is(firstErr, syscall.ENOSPC) {
		t.Fatalf("commit on a full disk: %v, want ENOSPC", firstErr)
	}
	if v := w.counter(t, "shoal_wal_writable"); v != 0 {
		t.Errorf("shoal_wal_writable = %v after a failed write, want 0", v)
	}
	// Refused at once, and again after the retry interval while still full.
	for range 3 {
		err := commit(next())
		if !errors.Is(err, errUnwritable) {
			t.Fatalf("commit while unwritable: %v, want errUnwritable", err)
		}
	}
	if v := w.counter(t, "shoal_wal_write_failures_total"); v != 1 {
		t.Errorf("shoal_wal_write_failures_total = %v, want 1 (one write failed, the others were refused)", v)
	}
	if v := w.counter(t, "shoal_wal_rejected_samples_total", "reason", "unwritable"); v != float64(4*len(series)) {
		t.Errorf("shoal_wal_rejected_samples_total{reason=unwritable} = %v, want %d", v, 4*len(series))
	}
	if err := w.Truncate(); err == nil {
		t.Error("truncation ran while the WAL was unwritable")
	}

	free()
	for range 5 {
		if err := commit(next()); err != nil {
			t.Fatalf("commit once space is back: %v", err)
		}
	}
	if v := w.counter(t, "shoal_wal_writable"); v != 1 {
		t.Errorf("shoal_wal_writable = %v after recovery, want 1", v)
	}
	if v := w.counter(t, "shoal_wal_write_recoveries_total"); v != 1 {
		t.Errorf("shoal_wal_write_recoveries_total = %v, want 1", v)
	}
	if err := w.Truncate(); err != nil {
		t.Errorf("truncation after recovery: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// Replay: no damage left, every committed sample there once, in order.
	w2 := openTest(t, dir, opts, w.clock)
	if v := w2.counter(t, "shoal_wal_corruptions_repaired_total"); v != 0 {
		t.Errorf("replay after recovery repaired %v corruptions, want 0", v)
	}
	c := readRecords(t, dir)
	byRef := map[uint64]labels.Labels{}
	allSeries := c.series
	if cp, _, err := wlog.LastCheckpoint(dir); err == nil {
		allSeries = append(readRecords(t, cp).series, allSeries...)
	}
	for _, s := range allSeries {
		byRef[uint64(s.Ref)] = s.Labels
	}
	seen := map[string]map[int64]int{}
	last := map[string]int64{}
	for _, s := range c.samples {
		ls, ok := byRef[uint64(s.Ref)]
		if !ok {
			t.Fatalf("sample of ref %d without a series record", s.Ref)
		}
		k := ls.String()
		if s.T <= last[k] {
			t.Fatalf("%s: sample at %d after %d: out of order or twice", k, s.T, last[k])
		}
		last[k] = s.T
		if seen[k] == nil {
			seen[k] = map[int64]int{}
		}
		seen[k][s.T]++
	}
	for ts := range committed {
		for _, ls := range series {
			if seen[ls.String()][ts] != 1 {
				t.Fatalf("%s@%d committed but found %d times", ls, ts, seen[ls.String()][ts])
			}
		}
	}
	t.Logf("%d batches committed; %d series", len(committed), len(seen))
	_ = w2
}

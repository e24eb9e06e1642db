package wal

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/wlog"
)

// recordEnds returns the offset just past each record in segment i.
func recordEnds(t *testing.T, dir string, i int) []int64 {
	t.Helper()
	seg, err := wlog.OpenReadSegment(wlog.SegmentName(dir, i))
	if err != nil {
		t.Fatal(err)
	}
	sr := wlog.NewSegmentBufReader(seg)
	defer sr.Close()
	r := wlog.NewReader(sr)
	var ends []int64
	for r.Next() {
		ends = append(ends, r.Offset())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return ends
}

func TestTornTailIsRepaired(t *testing.T) {
	for _, tc := range []struct {
		name string
		// damage breaks segment file f whose records end at ends; it returns
		// how many commits (one sample record each after the first) survive.
		damage func(t *testing.T, f string, ends []int64) (keptRecords int)
	}{
		{"cut-mid-record", func(t *testing.T, f string, ends []int64) int {
			n := len(ends)
			if err := os.Truncate(f, (ends[n-2]+ends[n-1])/2); err != nil {
				t.Fatal(err)
			}
			return n - 1
		}},
		{"garbage-appended", func(t *testing.T, f string, ends []int64) int {
			fh, err := os.OpenFile(f, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fh.Write(bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 300)); err != nil {
				t.Fatal(err)
			}
			fh.Close()
			return len(ends)
		}},
		{"garbage-in-padding", func(t *testing.T, f string, ends []int64) int {
			fh, err := os.OpenFile(f, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fh.WriteAt([]byte{0x01, 0x00, 0x10, 0xaa, 0xbb, 0xcc, 0xdd, 0x42}, ends[len(ends)-1]); err != nil {
				t.Fatal(err)
			}
			fh.Close()
			return len(ends)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			opts := Options{}
			series := makeSeries(10, "m")
			w := openTest(t, dir, opts, clock)
			const commits = 20
			base := clock.Ms()
			for i := range commits {
				appendFloats(t, w.Storage, series, base+int64(i)*1000, float64(i))
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			_, last := segmentRange(t, dir)
			ends := recordEnds(t, dir, last)
			if len(ends) != commits+1 { // series record + one sample record per commit
				t.Fatalf("segment has %d records, want %d", len(ends), commits+1)
			}
			kept := tc.damage(t, wlog.SegmentName(dir, last), ends)
			keptCommits := kept - 1

			w = openTest(t, dir, opts, clock)
			if n := w.counter(t, "shoal_wal_corruptions_repaired_total"); n != 1 {
				t.Fatalf("corruptions repaired = %v, want 1", n)
			}
			// The repair record keeps the cut: the kept records end before
			// its offset, at the offsets they had, so a reader's position at
			// or before the cut stays exact.
			rep, err := ReadRepairs(dir)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Segment != last || rep.Offset <= ends[kept-1] {
				t.Fatalf("repair record %+v, want segment %d and an offset past the last kept record's end %d", rep, last, ends[kept-1])
			}
			if got := recordEnds(t, dir, last); !slices.Equal(got, ends[:kept]) {
				t.Fatalf("repaired segment's records end at %v, want the original %v", got, ends[:kept])
			}
			if _, _, past := rep.Cut(last, ends[kept-1]); past {
				t.Fatal("a position at the last kept record counts as past the cut")
			}
			if seg, off, past := rep.Cut(last+1, 10); !past || seg != last || off != rep.Offset {
				t.Fatalf("Cut(next segment) = %d/%d/%v, want back to the cut", seg, off, past)
			}
			if w.ActiveSeries() != len(series) {
				t.Fatalf("active series = %d, want %d", w.ActiveSeries(), len(series))
			}
			// The series' newest timestamp is the last surviving commit's: the
			// lost commit's timestamp is free again, the one before is not.
			app := w.AppenderV2(t.Context())
			if keptCommits < commits {
				if _, err := app.Append(0, series[0], 0, base+int64(keptCommits)*1000, 7, nil, nil, storage.AOptions{}); err != nil {
					t.Fatalf("append at the lost commit's timestamp: %v", err)
				}
			}
			if _, err := app.Append(0, series[1], 0, base+int64(keptCommits-1)*1000, 7, nil, nil, storage.AOptions{}); err == nil {
				t.Fatal("append at the last surviving commit's timestamp with another value: no error")
			}
			if err := app.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}

			// Every record before the damage is intact, and the WAL reads cleanly.
			c := readRecords(t, dir)
			wantSamples := keptCommits * len(series)
			if keptCommits < commits {
				wantSamples++
			}
			if len(c.samples) != wantSamples {
				t.Fatalf("WAL holds %d samples after repair, want %d", len(c.samples), wantSamples)
			}
			for i := range keptCommits * len(series) {
				if want := base + int64(i/len(series))*1000; c.samples[i].T != want {
					t.Fatalf("sample %d has ts %d, want %d", i, c.samples[i].T, want)
				}
			}

			// A clean reopen finds nothing to repair.
			w = openTest(t, dir, opts, clock)
			if n := w.counter(t, "shoal_wal_corruptions_repaired_total"); n != 0 {
				t.Fatalf("corruptions repaired on clean reopen = %v, want 0", n)
			}
		})
	}
}

package remotewrite

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/shoal-dev/shoal/wal"
)

// journalOps drives a real journal from fuzz bytes: an even byte records an
// intent of 1..4 items (each from the next byte: series ref, exemplar bit,
// timestamp), an odd byte settles one of the unsettled intents. It returns
// the file size after the header and after each record, and the model of
// what each prefix of records means.
type journalOp struct {
	id    uint64
	done  bool // a "done" record for id; otherwise an intent
	maxT  map[wmKey]int64
	end   position
	after int64 // file size once this record is written
}

func writeJournalOps(t testing.TB, path string, base position, repairs int, ops []byte) (hdrEnd int64, recs []journalOp) {
	t.Helper()
	j := newJournal(path)
	if err := j.open(base, repairs, false, 0); err != nil {
		t.Fatal(err)
	}
	defer j.close()
	size := func() int64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	hdrEnd = size()
	var undone []uint64
	end := base
	for i := 0; i < len(ops); i++ {
		b := ops[i]
		if b&1 == 1 && len(undone) > 0 {
			k := int(b>>1) % len(undone)
			id := undone[k]
			undone = append(undone[:k], undone[k+1:]...)
			if err := j.done(id); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, journalOp{id: id, done: true, after: size()})
			continue
		}
		n := int(b>>1)%4 + 1
		var items []item
		maxT := map[wmKey]int64{}
		for ; n > 0 && i+1 < len(ops); n-- {
			i++
			x := ops[i]
			it := item{ref: chunks.HeadSeriesRef(x % 5), t: int64(x>>3) - 8}
			if x&0x80 != 0 {
				it.kind = kindExemplar
			}
			items = append(items, it)
			k := wmKey{it.ref, it.kind == kindExemplar}
			if v, ok := maxT[k]; !ok || it.t > v {
				maxT[k] = it.t
			}
		}
		end.Offset += int64(b) + 1
		if b&0x40 != 0 {
			end = position{Segment: end.Segment + 1, Offset: int64(b)}
		}
		id, err := j.intent(items, end)
		if err != nil {
			t.Fatal(err)
		}
		undone = append(undone, id)
		recs = append(recs, journalOp{id: id, maxT: maxT, end: end, after: size()})
	}
	return hdrEnd, recs
}

// expectRecovery is what load must find in recs: the acknowledged and
// pending timestamps and the furthest round end; nil when there is nothing.
func expectRecovery(base position, recs []journalOp) *recovery {
	done := map[uint64]bool{}
	for _, r := range recs {
		if r.done {
			done[r.id] = true
		}
	}
	r := &recovery{acked: map[wmKey]int64{}, pending: map[wmKey]pendingReq{}, end: base}
	for _, in := range recs {
		if in.done {
			continue
		}
		if r.end.less(in.end) {
			r.end = in.end
		}
		for k, t := range in.maxT {
			if done[in.id] {
				if v, ok := r.acked[k]; !ok || t > v {
					r.acked[k] = t
				}
			} else if p, ok := r.pending[k]; !ok || t > p.maxT {
				r.pending[k] = pendingReq{id: in.id, maxT: t}
			}
		}
	}
	if len(r.acked) == 0 && len(r.pending) == 0 {
		return nil
	}
	return r
}

// FuzzJournalTornTail writes a valid journal with the journal's own writer,
// then tears it at an arbitrary byte (truncation) or damages one byte:
// load must return exactly the records before the damage, never an error.
func FuzzJournalTornTail(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3}, uint32(1000), false)
	f.Add([]byte{2, 9, 17, 4, 0x81, 1, 6, 3, 4, 5, 6, 3, 1}, uint32(60), false)
	f.Add([]byte{0x40, 7, 0x42, 8, 9, 1, 3}, uint32(45), true)
	f.Add([]byte{6, 0xff, 0x80, 0x7f, 0, 1, 0x46, 1, 2, 3, 4, 3}, uint32(7), true)
	f.Add([]byte{}, uint32(3), false)
	// One file per worker process, rewritten by each run: a directory per
	// run would make the fuzzer spend its time creating and removing them.
	path := filepath.Join(f.TempDir(), "q.acks")
	f.Fuzz(func(t *testing.T, ops []byte, cut uint32, flip bool) {
		if len(ops) > 64 {
			return // a few dozen records cover every case; more only slow the fuzzer
		}
		base := position{Segment: 2, Offset: 4096}
		hdrEnd, recs := writeJournalOps(t, path, base, 3, ops)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		at := int64(cut) % (int64(len(b)) + 1)
		if flip && at < int64(len(b)) {
			b[at] ^= 0xff
		} else {
			b = b[:at]
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		// The records that end at or before the cut, or before the damaged
		// byte, survive; a damaged header means nothing to recover.
		var want *recovery
		if at >= hdrEnd {
			n := 0
			for n < len(recs) && recs[n].after <= at {
				n++
			}
			want = expectRecovery(base, recs[:n])
		}
		got, err := newJournal(path).load(base, 3)
		if err != nil {
			t.Fatalf("load of a torn journal: %v", err)
		}
		if (got == nil) != (want == nil) {
			t.Fatalf("load = %+v, want %+v", got, want)
		}
		if got != nil && (!reflect.DeepEqual(got.acked, want.acked) || !reflect.DeepEqual(got.pending, want.pending) || got.end != want.end) {
			t.Fatalf("load = %+v, want %+v", got, want)
		}
	})
}

// FuzzJournalLoad reads arbitrary bytes as a journal: load returns an error
// or a recovery (or nothing), never panics or hangs; and a recovery that is
// kept (open with keep, as the queue does) reads back the same.
func FuzzJournalLoad(f *testing.F) {
	base := position{Segment: 5, Offset: 12}
	// Valid journals written by the journal itself.
	for _, ops := range [][]byte{{}, {0, 7}, {2, 1, 2, 0x81, 1}, {4, 3, 4, 5, 0x42, 6, 1, 3}} {
		path := filepath.Join(f.TempDir(), "seed.acks")
		writeJournalOps(f, path, base, 1, ops)
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(1), uint8(0))
		f.Add(b, uint8(2), uint8(2)) // one repair later: the stale path
	}
	// Malformed: empty, a bare frame header, a frame of a huge length, an
	// intent claiming more entries than it holds, a record before the header.
	frame := func(p []byte) []byte { return appendFrame(nil, p) }
	hdr := frame([]byte{recHeader, journalVersion, 5, 12, 1})
	f.Add([]byte{}, uint8(1), uint8(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, uint8(1), uint8(0))
	f.Add(append(append([]byte(nil), hdr...), frame(binary.AppendUvarint([]byte{recIntent, 1, 5, 20}, 1<<40))...), uint8(1), uint8(0))
	f.Add(frame([]byte{recDone, 1}), uint8(1), uint8(0))
	f.Add(frame([]byte{recHeader, 9, 5, 12, 1}), uint8(1), uint8(0))
	f.Add(append(append([]byte(nil), hdr...), frame([]byte{recIntent, 1, 5, 20, 2, 1, 0, 2})...), uint8(1), uint8(0))
	path := filepath.Join(f.TempDir(), "q.acks") // one per worker, see above
	f.Fuzz(func(t *testing.T, data []byte, repairs, cutSeg uint8) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		j := newJournal(path)
		j.lastRepair = wal.Repairs{Generation: int(repairs), Segment: int(cutSeg), Offset: 100}
		r, err := j.load(base, int(repairs))
		if err != nil || r == nil {
			return
		}
		if r.end.less(base) {
			t.Fatalf("recovery ends at %+v, before its base %+v", r.end, base)
		}
		if err := j.open(base, int(repairs), true, 1<<20); err != nil {
			t.Fatal(err)
		}
		j.close()
		j2 := newJournal(path)
		r2, err := j2.load(base, int(repairs))
		if err != nil || r2 == nil {
			t.Fatalf("reload of a kept journal: %v, %v", r2, err)
		}
		if !reflect.DeepEqual(r.acked, r2.acked) || !reflect.DeepEqual(r.pending, r2.pending) || r.end != r2.end {
			t.Fatalf("kept journal reads back %+v, want %+v", r2, r)
		}
	})
}

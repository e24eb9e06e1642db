package cluster

import (
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzDecodeMeta decodes arbitrary bytes from a peer as node metadata: an
// error (the peer is then a viewer) or valid metadata that encodes back to
// the same, never a panic.
func FuzzDecodeMeta(f *testing.F) {
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	f.Add(encodeMeta(Viewer, "", start, 0))
	f.Add(encodeMeta(Participant, "10.0.0.7:9940", start, 42))
	f.Add(encodeMetaWith(Terminating, "https://shoal-2.shoal-cluster.monitoring.svc:9940", start, 1<<40,
		Watermarks{FencedSeq: 7, FencedRing: 0xdeadbeefcafef00d, AckedSeq: 6}))
	for _, s := range []string{
		"", "\x00not json", "null", "{}", `{"v":2,"s":"participant"}`, `{"v":1,"s":"leader"}`,
		`{"v":1,"s":"participant","t":1e300}`, `{"v":1,"s":"viewer","fs":-1}`, `[{"v":1}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, st, err := decodeMeta(b)
		if err != nil {
			if st != Viewer {
				t.Fatalf("undecodable metadata %q gives state %v, want viewer", b, st)
			}
			return
		}
		if !st.valid() || st.String() != m.State {
			t.Fatalf("decoded state %v from %q", st, m.State)
		}
		again, st2, err := decodeMeta(encodeMetaFull(st, m.HTTPAddr, m.KubeNode, time.UnixMilli(m.StartTime), m.Lamport, m.watermarks(), m.configIDs(), m.carried()))
		if err != nil || st2 != st {
			t.Fatalf("re-encoded %+v: %v, %v", m, st2, err)
		}
		// [] and absent read the same, and so do a short entry and one
		// padded with zeros or longer than a Carry.
		m.Carried = carriedMeta(m.carried())
		if utf8.ValidString(m.HTTPAddr) && utf8.ValidString(m.KubeNode) && !reflect.DeepEqual(again, m) {
			t.Fatalf("re-encoded %+v reads back as %+v", m, again)
		}
	})
}

// FuzzMetaRoundTrip encodes valid metadata, hand-off watermarks included,
// and requires the decoded value to be exactly what was encoded.
func FuzzMetaRoundTrip(f *testing.F) {
	f.Add(uint8(1), "10.0.0.7:9940", int64(1764493200000), uint64(3), uint64(7), uint64(0xdeadbeefcafef00d), uint64(6))
	f.Add(uint8(0), "", int64(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint8(2), "[::1]:9940", int64(-1), uint64(1<<63), uint64(1<<64-1), uint64(1), uint64(1<<64-1))
	f.Fuzz(func(t *testing.T, state uint8, addr string, startMs int64, lamport, fencedSeq, fencedRing, ackedSeq uint64) {
		if !utf8.ValidString(addr) {
			return // JSON replaces invalid UTF-8; an address is never such
		}
		st := States[int(state)%len(States)]
		wm := Watermarks{FencedSeq: fencedSeq, FencedRing: fencedRing, AckedSeq: ackedSeq}
		m, got, err := decodeMeta(encodeMetaWith(st, addr, time.UnixMilli(startMs), lamport, wm))
		if err != nil {
			t.Fatal(err)
		}
		if got != st || m.HTTPAddr != addr || m.StartTime != startMs || m.Lamport != lamport || m.watermarks() != wm {
			t.Fatalf("round trip of %v %q %d %d %+v: %+v, %v", st, addr, startMs, lamport, wm, m, got)
		}
	})
}

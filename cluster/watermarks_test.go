package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/testutil"
)

func TestWatermarksRoundTripAndOldMetadataDecodes(t *testing.T) {
	wm := Watermarks{FencedSeq: 7, FencedRing: 0xfeedfacecafebeef, AckedSeq: 6, LostSeq: 5}
	b := encodeMetaWith(Participant, "h:1", time.UnixMilli(42), 3, wm)
	m, st, err := decodeMeta(b)
	if err != nil || st != Participant {
		t.Fatalf("decode: %v, %v", st, err)
	}
	if got := m.watermarks(); got != wm {
		t.Fatalf("watermarks = %+v, want %+v", got, wm)
	}
	if len(b) > 200 {
		t.Fatalf("metadata is %d bytes; memberlist allows 512 and the rest needs room", len(b))
	}

	// What a node of the previous version gossips: no watermarks.
	old := []byte(`{"v":1,"s":"terminating","h":"10.0.0.1:9940","t":1700000000000,"l":12}`)
	m, st, err = decodeMeta(old)
	if err != nil || st != Terminating || m.HTTPAddr != "10.0.0.1:9940" {
		t.Fatalf("old metadata: %+v %v %v", m, st, err)
	}
	if m.watermarks() != (Watermarks{}) {
		t.Fatalf("old metadata decoded watermarks %+v, want zero", m.watermarks())
	}

	// A node with watermarks that does not announce LostSeq: any of its
	// fences may have stopped targets, so the last one counts.
	older := []byte(`{"v":1,"s":"participant","t":1700000000000,"l":12,"fs":9,"as":8,"f":3}`)
	if m, _, err = decodeMeta(older); err != nil || m.watermarks().LostSeq != 9 {
		t.Fatalf("metadata without LostSeq: LostSeq = %d (%v), want FencedSeq 9", m.watermarks().LostSeq, err)
	}
	// One that does and has stopped nothing in this life announces zero.
	none := []byte(`{"v":1,"s":"participant","t":1700000000000,"l":12,"fs":9,"as":8,"f":7}`)
	if m, _, err = decodeMeta(none); err != nil || m.watermarks().LostSeq != 0 {
		t.Fatalf("metadata with LostSeq zero: LostSeq = %d (%v), want 0", m.watermarks().LostSeq, err)
	}
	if m.watermarks().Continued {
		t.Fatal("metadata without featureContinued decoded as continuing its numbering")
	}
	if m.watermarks().Final {
		t.Fatal("metadata without featureFinal decoded as past its final fence")
	}
	// One whose fence numbering goes on from its previous life.
	continued := []byte(`{"v":1,"s":"participant","t":1700000000000,"l":12,"fs":9,"as":8,"f":15}`)
	if m, _, err = decodeMeta(continued); err != nil || !m.watermarks().Continued || m.watermarks().Final {
		t.Fatalf("metadata with featureContinued: %+v (%v), want Continued, not Final", m.watermarks(), err)
	}
	// One past its final fence, numbering afresh.
	final := []byte(`{"v":1,"s":"terminating","t":1700000000000,"l":12,"fs":9,"as":8,"f":23}`)
	if m, _, err = decodeMeta(final); err != nil || !m.watermarks().Final || m.watermarks().Continued {
		t.Fatalf("metadata with featureFinal: %+v (%v), want Final, not Continued", m.watermarks(), err)
	}
}

func TestWatermarksReachPeers(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 2, nil)
	testutil.Eventually(t, 10*time.Second, "two nodes see each other", func() error {
		if len(nodes[1].Peers()) != 2 {
			return fmt.Errorf("node 2 sees %d", len(nodes[1].Peers()))
		}
		return nil
	})
	changes, unsubscribe := nodes[1].Subscribe()
	defer unsubscribe()
	wm := Watermarks{FencedSeq: 3, FencedRing: 99, AckedSeq: 2, LostSeq: 1, Continued: true, Final: true}
	nodes[0].SetWatermarks(wm)
	if nodes[0].Self().Handoff != wm {
		t.Fatalf("Self().Handoff = %+v", nodes[0].Self().Handoff)
	}
	testutil.Eventually(t, 10*time.Second, "watermarks gossiped", func() error {
		for _, p := range nodes[1].Peers() {
			if p.Name == nodes[0].cfg.NodeName && p.Handoff == wm {
				return nil
			}
		}
		return fmt.Errorf("node 2 sees %+v", nodes[1].Peers())
	})
	select {
	case <-changes:
	default:
		t.Fatal("a watermark change did not notify subscribers")
	}
}

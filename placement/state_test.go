package placement

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/wal"
)

// stop ends h's Run as a kill would: nothing is flushed or saved on the
// way out.
func (h *harness) stop() {
	h.cancel()
	<-h.done
	h.c.Close()
}

// A node killed while a hold waits for a peer's backlog keeps that hold in
// its next life, before its queues send anything, and goes on numbering its
// fences where it stopped: its samples of the gained targets must not
// overtake the peer's older ones after the restart.
func TestHoldsAndFenceNumberingSurviveARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := Options{HandoffTimeout: time.Hour, StatePath: filepath.Join(t.TempDir(), "handoff.json")}
		w := &fakeWAL{}
		r := ring.New([]string{"a", "b"}, 8)
		born := time.Unix(100, 0)
		b := participant("b", cluster.Watermarks{FencedSeq: 5, LostSeq: 5, FencedRing: RingID(r), AckedSeq: 4})
		b.StartTime = born

		first := startOn(t, opts, w)
		first.cl.setPeer(b)
		first.cl.becomeReady()
		gainUnder(t, first, r)
		var held wal.Position
		for _, p := range first.remote.holds {
			held = p
		}
		fence1 := first.remote.flushed[0]
		synctest.Wait()
		first.stop()

		again := startOn(t, opts, w)
		if again.remote.held() != 1 {
			t.Fatalf("the restarted node holds %d positions before its queues start, want the hold of the life before", again.remote.held())
		}
		for _, p := range again.remote.holds {
			if p != held {
				t.Fatalf("restored hold at %v, want %v", p, held)
			}
		}
		synctest.Wait()
		wm := again.cl.Self().Handoff
		if wm.FencedSeq != 1 || wm.AckedSeq != 0 || !wm.Continued {
			t.Fatalf("watermarks after the restart %+v, want fence 1 carried over, unacknowledged, Continued", wm)
		}
		// Before the cluster is ready no peer is known: b would count as
		// gone and the hold would go.
		time.Sleep(time.Second)
		synctest.Wait()
		if again.remote.held() != 1 {
			t.Fatal("restored hold released before the cluster was ready")
		}
		again.cl.setPeer(b)
		again.cl.becomeReady()
		time.Sleep(time.Second)
		synctest.Wait()
		if again.remote.held() != 1 {
			t.Fatal("restored hold released while b's fence 5 is not acknowledged")
		}
		b.Handoff.AckedSeq = 5
		again.cl.setPeer(b)
		synctest.Wait()
		if again.remote.held() != 0 {
			t.Fatal("restored hold kept after b acknowledged fence 5")
		}

		// The fence of the life before is acknowledged by position, and the
		// next fence takes the next number.
		again.remote.ack(fence1)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := again.cl.Self().Handoff.AckedSeq; got != 1 {
			t.Fatalf("acked seq %d after the queues delivered the life before's fence, want 1", got)
		}
		again.c.Fenced(ring.New([]string{"a", "b", "c"}, 8), 0, true)
		if got := again.cl.Self().Handoff.FencedSeq; got != 2 {
			t.Fatalf("first fence of the new life numbered %d, want 2", got)
		}
		again.stop()

		st, ok, err := readState(opts.StatePath)
		if err != nil || !ok {
			t.Fatalf("state after the second life: %v %v", ok, err)
		}
		if st.FencedSeq != 2 || st.AckedSeq != 1 || len(st.Holds) != 0 || len(st.Pending) != 1 {
			t.Fatalf("saved state %+v, want fence 2 pending, 1 acknowledged, no hold", st)
		}
	})
}

// A peer that restarted and carried its fence numbering over is waited for
// by the number of the fence the hold needs; one that started afresh, by
// its first acknowledged fence.
func TestHoldWaitsForARestartedPeersFenceByNumber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{HandoffTimeout: time.Hour})
		r := ring.New([]string{"a", "b"}, 8)
		id := RingID(r)
		born := time.Unix(100, 0)
		b := participant("b", cluster.Watermarks{FencedSeq: 7, LostSeq: 7, FencedRing: id, AckedSeq: 3})
		b.StartTime = born
		h.cl.setPeer(b)
		gainUnder(t, h, r)

		b.StartTime = born.Add(time.Minute)
		b.Handoff = cluster.Watermarks{FencedSeq: 8, LostSeq: 7, FencedRing: id, AckedSeq: 6, Continued: true}
		h.cl.setPeer(b)
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released while the restarted b has acknowledged fence 6 of the 7 it needs")
		}
		b.Handoff.AckedSeq = 7
		h.cl.setPeer(b)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept after the restarted b acknowledged fence 7")
		}
	})
}

// A state file this build cannot read is reported, and the node starts
// afresh: it neither fails nor takes up half a state.
func TestUnreadableStateStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "handoff.json")
		if err := os.WriteFile(path, []byte(`{"version":99,"fencedSeq":4}`), 0o644); err != nil {
			t.Fatal(err)
		}
		h := start(t, Options{StatePath: path})
		synctest.Wait()
		if wm := h.cl.Self().Handoff; wm.FencedSeq != 0 || wm.Continued {
			t.Fatalf("watermarks %+v from an unreadable state, want a fresh start", wm)
		}
		if !strings.Contains(h.log.String(), "Cannot read the hand-off state") {
			t.Fatalf("no warning in the log:\n%s", h.log.String())
		}
	})
}

// A peer restarted on its storage that has not fenced in its new life may
// still send samples of its previous life, scraped after its last fence:
// they lie before its first fence of the new life, and a hold waits for
// that fence's acknowledgement past the hand-off delay (the fence comes
// before any hold of the peer's new life, so the wait points back in
// time). If the life before ended cleanly, that fence stopped nothing and
// the hold waits for nothing more.
func TestHoldWaitsForARestartedPeersFirstFence(t *testing.T) {
	for _, clean := range []bool{false, true} {
		t.Run(map[bool]string{false: "killed", true: "stopped cleanly"}[clean], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := start(t, Options{HandoffTimeout: time.Hour})
				r := ring.New([]string{"a", "b"}, 8)
				b := cluster.Peer{Name: "b", State: cluster.Viewer, StartTime: time.Unix(100, 0),
					Handoff: cluster.Watermarks{FencedSeq: 5, LostSeq: 5, AckedSeq: 5, Continued: true}}
				h.cl.setPeer(b)
				gainUnder(t, h, r)
				time.Sleep(time.Minute) // far past the hand-off delay
				synctest.Wait()
				if h.remote.held() != 1 {
					t.Fatal("hold released before the restarted b fenced in its new life")
				}
				b.Handoff = cluster.Watermarks{FencedSeq: 6, FencedRing: RingID(r), LostSeq: 6, AckedSeq: 5, Continued: true}
				if clean {
					b.Handoff.LostSeq = 5
				}
				h.cl.setPeer(b)
				synctest.Wait()
				if clean {
					if h.remote.held() != 0 {
						t.Fatal("hold kept although b's first fence after a clean stop stopped nothing")
					}
					return
				}
				if h.remote.held() != 1 {
					t.Fatal("hold released before b acknowledged its first fence of the new life")
				}
				b.Handoff.AckedSeq = 6
				h.cl.setPeer(b)
				synctest.Wait()
				if h.remote.held() != 0 {
					t.Fatal("hold kept after b acknowledged its first fence of the new life")
				}
			})
		})
	}
}

// The first fence after a life that ended without its final fence
// acknowledged counts as one that stopped targets (that life may have
// scraped after its last fence); after a clean stop it does not.
func TestFirstFenceAfterAKillCountsAsStoppingTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := Options{TerminateGrace: time.Second, StatePath: filepath.Join(t.TempDir(), "handoff.json")}
		w := &fakeWAL{}
		r := ring.New([]string{"a", "b"}, 8)
		first := startOn(t, opts, w)
		first.c.Fenced(r, 0, true)
		synctest.Wait()
		first.stop()

		killed := startOn(t, opts, w)
		killed.c.Fenced(r, 0, true)
		synctest.Wait()
		if wm := killed.cl.Self().Handoff; wm.FencedSeq != 2 || wm.LostSeq != 2 {
			t.Fatalf("first fence after a kill: %+v, want fence 2 counted as stopping targets", wm)
		}
		// A clean stop: the final fence acknowledged.
		done := make(chan struct{})
		go func() {
			defer close(done)
			killed.c.Terminate()
		}()
		synctest.Wait()
		killed.c.Fenced(ring.New([]string{"b"}, 8), 0, false)
		killed.remote.ack(wal.Position{Segment: 1 << 30})
		<-done
		killed.stop()

		clean := startOn(t, opts, w)
		clean.c.Fenced(r, 0, true)
		synctest.Wait()
		if wm := clean.cl.Self().Handoff; wm.FencedSeq != 4 || wm.LostSeq != 2 {
			t.Fatalf("first fence after a clean stop: %+v, want fence 4 with the lost seq of before (2)", wm)
		}
	})
}

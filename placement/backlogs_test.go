package placement

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/wal"
)

// fakeBacklogs carries departed nodes' backlogs until delivered.
type fakeBacklogs struct {
	mu      sync.Mutex
	carried []Departed
}

func (b *fakeBacklogs) Pending(node string, start time.Time, _ uint64, _ bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, d := range b.carried {
		if d.Node == node && d.Start.Equal(start) {
			return true
		}
	}
	return false
}

func (b *fakeBacklogs) Carried() []Departed {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Departed(nil), b.carried...)
}

func (b *fakeBacklogs) deliver() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.carried = nil
}

// A node restarted while it carries a departed node's backlog may have
// written samples of that node's targets behind a hold of its previous
// life: its whole WAL stays held until the backlog is delivered.
func TestRestartedCarrierHoldsItsWALUntilTheBacklogIsDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBacklogs{carried: []Departed{{Node: "d", Start: time.Unix(100, 0), Seq: 7}}}
		h := start(t, Options{HandoffTimeout: time.Minute, Backlogs: b})
		h.remote.mu.Lock()
		var positions []wal.Position
		for _, p := range h.remote.holds {
			positions = append(positions, p)
		}
		h.remote.mu.Unlock()
		if len(positions) != 1 || positions[0] != (wal.Position{}) {
			t.Fatalf("holds at start %v, want one at the WAL's first position", positions)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released while the backlog is still carried")
		}
		b.deliver()
		time.Sleep(time.Second)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept after the backlog was delivered")
		}
	})
}

func TestRestartedCarrierHoldEndsAtTheHandoffTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &fakeBacklogs{carried: []Departed{{Node: "d", Start: time.Unix(100, 0), Seq: 7}}}
		h := start(t, Options{HandoffTimeout: time.Minute, Backlogs: b})
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if h.remote.held() != 1 {
			t.Fatal("hold released before --cluster.handoff-timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if h.remote.held() != 0 {
			t.Fatal("hold kept past --cluster.handoff-timeout")
		}
	})
}

func TestNodeWithoutCarriedBacklogsStartsUnheld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, Options{Backlogs: &fakeBacklogs{}})
		synctest.Wait()
		if n := h.remote.held(); n != 0 {
			t.Fatalf("%d holds at start without carried backlogs", n)
		}
	})
}

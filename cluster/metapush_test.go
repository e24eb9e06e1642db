package cluster

import (
	"fmt"
	"net"
	"reflect"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// TestFenceReachesPeerByPushWithoutGossip: with memberlist's gossip, probes
// and state exchange all an hour apart, a watermark change can only reach
// the peer through the direct push.
func TestFenceReachesPeerByPushWithoutGossip(t *testing.T) {
	tn := newTestNet(t)
	idle := func(c *memberlist.Config) {
		fastTimings(c)
		c.GossipInterval = time.Hour
		c.ProbeInterval = time.Hour
		c.PushPullInterval = time.Hour
	}
	var nodes []testNode
	for i := 1; i <= 2; i++ {
		cfg := testConfig(tn, i)
		cfg.Memberlist = idle
		cfg.Join = []string{tn.addr(1)}
		nodes = append(nodes, startNode(t, cfg))
	}
	a, b := nodes[0], nodes[1]
	testutil.Eventually(t, 10*time.Second, "both nodes see each other", func() error {
		if view(a.Node) != view(b.Node) || len(a.Peers()) != 2 {
			return fmt.Errorf("a sees %s, b %s", view(a.Node), view(b.Node))
		}
		return nil
	})

	want := Watermarks{FencedSeq: 7, FencedRing: 42, AckedSeq: 6, FencedPlacement: 9}
	a.SetWatermarks(want)
	testutil.Eventually(t, 10*time.Second, "b holds a's fence", func() error {
		if got := peerNamed(b.Node, "node-01").Handoff; got != want {
			return fmt.Errorf("b holds %+v of a, want %+v", got, want)
		}
		return nil
	})
	if got := promtestutil.ToFloat64(b.metrics.receivedEvents.WithLabelValues(eventPush)); got < 1 {
		t.Errorf("b counted %v pushes, want at least 1", got)
	}
	if got := promtestutil.ToFloat64(a.metrics.metaPushes.WithLabelValues("success")); got < 1 {
		t.Errorf("a counted %v successful pushes, want at least 1", got)
	}
}

// TestOlderGossipDoesNotUndoAPushedUpdate: gossip and pushes may deliver a
// peer's metadata out of order; the newest of one life wins, and another
// life's metadata (a restart) replaces it whatever its sequence.
func TestOlderGossipDoesNotUndoAPushedUpdate(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_000)
	meta := func(seq, fenced uint64, start time.Time) []byte {
		return nodeMeta{State: Participant.String(), StartTime: start.UnixMilli(), Seq: seq,
			Features: featureMetaPush, FencedSeq: fenced}.marshal()
	}
	heard := func(b []byte) {
		n.observe(&memberlist.Node{Name: "peer", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: b}, "update")
	}
	fenced := func() uint64 { return peerNamed(n, "peer").Handoff.FencedSeq }

	heard(meta(2, 1, start))
	n.receiveMetaPush(encodeMetaPush("peer", meta(5, 3, start)))
	if got := fenced(); got != 3 {
		t.Fatalf("after the push: fenced %d, want 3", got)
	}
	heard(meta(3, 2, start))
	if got := fenced(); got != 3 {
		t.Errorf("older gossip after the push: fenced %d, want 3 kept", got)
	}
	n.receiveMetaPush(encodeMetaPush("peer", meta(4, 2, start)))
	if got := fenced(); got != 3 {
		t.Errorf("older push: fenced %d, want 3 kept", got)
	}
	n.receiveMetaPush(encodeMetaPush("peer", meta(9, 8, start.Add(time.Second))))
	if got := fenced(); got != 3 {
		t.Errorf("push of another life: fenced %d, want 3 kept (membership news comes from memberlist)", got)
	}
	heard(meta(1, 0, start.Add(time.Second)))
	if got := fenced(); got != 8 {
		t.Errorf("gossip of the peer's next life after its push: fenced %d, want the push's 8 (newer in that life)", got)
	}
	heard(meta(1, 0, start.Add(2*time.Second)))
	if got := fenced(); got != 0 {
		t.Errorf("gossip of a later life: fenced %d, want its 0", got)
	}
	n.receiveMetaPush(encodeMetaPush("stranger", meta(1, 1, start)))
	if len(n.Peers()) != 2 {
		t.Errorf("a push from a node memberlist has not reported added it: peers %v", n.Peers())
	}
}

// TestBadMetadataPushIsCountedAndIgnored: a truncated push or one with
// unreadable metadata changes nothing and is counted.
func TestBadMetadataPushIsCountedAndIgnored(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gossip(n, "peer", "127.0.0.2:7946", Participant)
	for i, b := range [][]byte{
		{msgMeta},
		{msgMeta, 200},
		encodeMetaPush("peer", []byte("{not json")),
		encodeMetaPush("peer", []byte(`{"v":99,"s":"terminating"}`)),
	} {
		(*delegate)(n).NotifyMsg(b)
		if got := promtestutil.ToFloat64(n.metrics.badMeta); got != float64(i+1) {
			t.Errorf("push %d: %v bad metadata counted, want %d", i, got, i+1)
		}
	}
	if p := peerNamed(n, "peer"); p.State != Participant {
		t.Errorf("peer is %s after bad pushes, want participant", p.State)
	}
}

// peerNamed is what n holds of one peer; the zero Peer when none.
func peerNamed(n *Node, name string) Peer {
	for _, p := range n.Peers() {
		if p.Name == name {
			return p
		}
	}
	return Peer{}
}

// TestSameMetadataTwiceWakesSubscribersOnce: an update that arrives by push
// and again by gossip wakes the node's subscribers (placement, which then
// reads every peer) once, not twice; a real change wakes them again.
func TestSameMetadataTwiceWakesSubscribersOnce(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_000)
	meta := func(seq, fenced uint64) []byte {
		return nodeMeta{State: Participant.String(), StartTime: start.UnixMilli(), Seq: seq,
			Features: featureMetaPush, FencedSeq: fenced}.marshal()
	}
	heard := func(b []byte) {
		n.observe(&memberlist.Node{Name: "peer", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: b}, "update")
	}
	heard(meta(1, 0))
	changes, stop := n.Subscribe()
	defer stop()
	woken := func() bool {
		select {
		case <-changes:
			return true
		default:
			return false
		}
	}
	n.receiveMetaPush(encodeMetaPush("peer", meta(2, 1)))
	if !woken() {
		t.Fatal("a pushed fence did not wake the subscriber")
	}
	heard(meta(2, 1))
	if woken() {
		t.Error("the same metadata again by gossip woke the subscriber")
	}
	heard(meta(1, 0))
	if woken() {
		t.Error("older metadata by gossip woke the subscriber")
	}
	heard(meta(3, 2))
	if !woken() {
		t.Error("newer metadata by gossip did not wake the subscriber")
	}
}

// TestPeerSameComparesEveryField: same must tell two peers apart by any
// field, or a change of a field added later would be dropped as a repeat.
func TestPeerSameComparesEveryField(t *testing.T) {
	typ := reflect.TypeFor[Peer]()
	for i := range typ.NumField() {
		var a, b Peer
		f := reflect.ValueOf(&b).Elem().Field(i)
		// Unexported fields too: this test is in the package.
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		if !setNonZero(f) {
			t.Fatalf("field %s: no way to change a %s; extend setNonZero", typ.Field(i).Name, f.Type())
		}
		if a.same(b) {
			t.Errorf("peers differing in %s are the same to Peer.same", typ.Field(i).Name)
		}
	}
}

// setNonZero gives v a value other than its zero value.
func setNonZero(v reflect.Value) bool {
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(time.Unix(5, 0)))
	case v.Kind() == reflect.String:
		v.SetString("x")
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.CanInt():
		v.SetInt(7)
	case v.CanUint():
		v.SetUint(7)
	case v.Kind() == reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case v.Kind() == reflect.Struct && v.NumField() > 0:
		return setNonZero(v.Field(0))
	default:
		return false
	}
	return true
}

// TestMetadataIsPushedOnlyToPeersThatReadPushes: a peer of an older
// version, whose metadata lacks featureMetaPush, is sent no push (it would
// count each one as a bad weight set); the push carries this node's name
// and current metadata.
func TestMetadataIsPushedOnlyToPeersThatReadPushes(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_000)
	for i, features := range []uint64{featureMetaPush, 0} {
		name := []string{"reader", "older"}[i]
		meta := nodeMeta{State: Participant.String(), StartTime: start.UnixMilli(), Seq: 1, Features: features}.marshal()
		n.observe(&memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.2"), Port: uint16(7946 + i), Meta: meta}, "join")
	}
	n.mu.Lock()
	out, ok := n.pendingMetaLocked()
	n.mu.Unlock()
	if !ok {
		t.Fatal("nothing pending to push")
	}
	want := []memberlist.Address{{Addr: "127.0.0.2:7946", Name: "reader"}}
	if fmt.Sprint(out.to) != fmt.Sprint(want) {
		t.Errorf("pushes go to %v, want %v", out.to, want)
	}
	name, meta, err := decodeMetaPush(out.msg())
	if err != nil || name != n.Self().Name {
		t.Fatalf("push names %q (err %v), want %q", name, err, n.Self().Name)
	}
	if _, st, err := decodeMeta(meta); err != nil || st != n.Self().State {
		t.Errorf("pushed state %s (err %v), want %s", st, err, n.Self().State)
	}
}

// TestPushBeforeJoinIsAppliedAtJoin: a node that has just joined pushes
// its state to members that hear of the join only later, by gossip. The
// push adds no member, but is applied when memberlist reports the member,
// if it is newer than what memberlist brings; a push of another life or an
// older one is not.
// TestPushBeforeJoinIsKeptForEarlyKeep: a push whose member memberlist
// does not report within earlyKeep is dropped, not applied later.
func TestPushBeforeJoinIsKeptForEarlyKeep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now().Add(-time.Minute)
		meta := func(st State, seq uint64) []byte {
			return nodeMeta{State: st.String(), StartTime: start.UnixMilli(), Seq: seq, Features: featureMetaPush}.marshal()
		}
		joined := func(name string) {
			n.observe(&memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: meta(Viewer, 1)}, "join")
		}
		n.receiveMetaPush(encodeMetaPush("soon", meta(Participant, 2)))
		n.receiveMetaPush(encodeMetaPush("late", meta(Participant, 2)))
		time.Sleep(earlyKeep - time.Second)
		joined("soon")
		time.Sleep(2 * time.Second)
		joined("late")
		if p := peerNamed(n, "soon"); p.State != Participant {
			t.Errorf("reported within %v: %s, want the pushed participant state", earlyKeep, p.State)
		}
		if p := peerNamed(n, "late"); p.State != Viewer {
			t.Errorf("reported after %v: %s, want the reported viewer state", earlyKeep, p.State)
		}
	})
}

func TestPushBeforeJoinIsAppliedAtJoin(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_000)
	meta := func(st State, seq uint64, start time.Time) []byte {
		return nodeMeta{State: st.String(), StartTime: start.UnixMilli(), Seq: seq, Features: featureMetaPush}.marshal()
	}
	joined := func(name string, b []byte) {
		n.observe(&memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: b}, "join")
	}
	n.receiveMetaPush(encodeMetaPush("new", meta(Participant, 2, start)))
	if p := peerNamed(n, "new"); p.Name != "" {
		t.Fatalf("a push before the join added the member: %+v", p)
	}
	joined("new", meta(Viewer, 1, start))
	if p := peerNamed(n, "new"); p.State != Participant {
		t.Errorf("after the join: %s, want the pushed participant state", p.State)
	}

	n.receiveMetaPush(encodeMetaPush("older", meta(Participant, 2, start)))
	joined("older", meta(Viewer, 3, start))
	if p := peerNamed(n, "older"); p.State != Viewer {
		t.Errorf("a push older than the join's metadata: %s, want viewer", p.State)
	}
	n.receiveMetaPush(encodeMetaPush("other", meta(Participant, 5, start)))
	joined("other", meta(Viewer, 1, start.Add(time.Second)))
	if p := peerNamed(n, "other"); p.State != Viewer {
		t.Errorf("a push of another life: %s, want viewer", p.State)
	}

	// A restarted member pushes its new life while gossip still brings
	// news of its previous one: that news does not discard the push.
	joined("back", meta(Participant, 7, start))
	n.receiveMetaPush(encodeMetaPush("back", meta(Participant, 2, start.Add(time.Minute))))
	n.observe(&memberlist.Node{Name: "back", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: meta(Terminating, 8, start)}, "update")
	n.observe(&memberlist.Node{Name: "back", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: meta(Viewer, 1, start.Add(time.Minute))}, "update")
	if p := peerNamed(n, "back"); p.State != Participant || !p.StartTime.Equal(start.Add(time.Minute)) {
		t.Errorf("the next life after gossip of the previous one: %s since %v, want the pushed participant state", p.State, p.StartTime)
	}
}

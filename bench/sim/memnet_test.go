package sim

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestMemNetTreatsAStoppedMemberAsADeadHost: packets reach a running
// member and are counted; to a stopped one they are lost without blocking
// the sender, and streams to it are refused.
func TestMemNetTreatsAStoppedMemberAsADeadHost(t *testing.T) {
	var n memNet
	a, b := n.newTransport(), n.newTransport()
	to := memberlist.Address{Addr: b.addr.String()}
	if _, err := a.WriteToAddress([]byte("ping"), to); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-b.PacketCh():
		if string(p.Buf) != "ping" || p.From.String() != a.addr.String() {
			t.Errorf("got %q from %s, want ping from %s", p.Buf, p.From, a.addr)
		}
	default:
		t.Fatal("packet not delivered")
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := a.DialAddressTimeout(to, time.Minute)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if _, err := c.Write([]byte("state")); err != nil {
			t.Error(err)
		}
	}()
	in := <-b.StreamCh()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(in, buf); err != nil || string(buf) != "state" {
		t.Errorf("stream read %q, %v", buf, err)
	}
	in.Close()
	<-done
	if got := n.bytes.Load(); got != 4+5 {
		t.Errorf("counted %d bytes, want 9 (a packet of 4, a stream of 5)", got)
	}

	_ = b.Shutdown()
	for range 2 * packetBuffer { // more than its buffer holds: none may block
		if _, err := a.WriteToAddress([]byte("ping"), to); err != nil {
			t.Fatal(err)
		}
	}
	if lost := n.lost.Load(); lost != 2*packetBuffer {
		t.Errorf("%d packets lost, want all %d sent to the stopped member", lost, 2*packetBuffer)
	}
	if _, err := a.DialAddressTimeout(to, time.Minute); !errors.Is(err, errRefused) {
		t.Errorf("dial to a stopped member: %v, want refused", err)
	}
}

package sim

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/memberlist"
)

// TestWireSizeIsWhatMemberlistSendsCompressed: a member with memberlist's
// compression off, on a network that counts wireSize, is counted exactly
// the bytes a member with compression on hands the network, for a packet
// that compresses, one that does not (memberlist then sends it as it
// is), and a stream message.
func TestWireSizeIsWhatMemberlistSendsCompressed(t *testing.T) {
	text := bytes.Repeat([]byte("shoal-17 127.0.0.17:7946 participant "), 30)
	noise := make([]byte, 900)
	for i := range noise {
		noise[i] = byte(rand.IntN(256))
	}
	for _, tc := range []struct {
		name   string
		msg    []byte
		stream bool
	}{
		{"compressible packet", text, false},
		{"incompressible packet", noise, false},
		{"stream message", text, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sent := sendOne(t, false, true, tc.msg, tc.stream)
			counted := sendOne(t, true, false, tc.msg, tc.stream)
			if counted != sent {
				t.Errorf("counted %d bytes with compression off, memberlist sent %d with it on", counted, sent)
			}
			if tc.name == "compressible packet" && sent >= int64(len(tc.msg)) {
				t.Errorf("sent %d bytes for a message of %d: not compressed", sent, len(tc.msg))
			}
		})
	}
}

// sendOne has a lone memberlist (no peers, so nothing else on the
// network) send msg to another address and returns the bytes counted.
func sendOne(t *testing.T, estimate, compression bool, msg []byte, stream bool) int64 {
	t.Helper()
	n := &memNet{compress: estimate}
	from, to := n.newTransport(), n.newTransport()
	cfg := memberlist.DefaultLANConfig()
	cfg.Name = "sender"
	cfg.Transport = from
	cfg.EnableCompression = compression
	cfg.LogOutput = io.Discard
	m, err := memberlist.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	before := n.bytes.Load()
	if !stream {
		if err := m.SendToAddress(memberlist.Address{Addr: to.addr.String(), Name: "receiver"}, msg); err != nil {
			t.Fatal(err)
		}
		<-to.PacketCh()
		return n.bytes.Load() - before
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := <-to.StreamCh()
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}()
	if err := m.SendReliable(&memberlist.Node{Name: "receiver", Addr: to.addr.IP, Port: uint16(to.addr.Port)}, msg); err != nil {
		t.Fatal(err)
	}
	<-done
	return n.bytes.Load() - before
}

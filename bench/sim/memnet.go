package sim

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// memNet is an in-memory network for memberlist members in one process.
// memberlist's own MockTransport delivers every packet on an unbuffered
// channel and never stops: a message to a member that has shut down
// blocks its sender for ever, and the sender's probe or gossip loop with
// it, so no survivor ever declares the dead member dead. Here a stopped
// member behaves like a dead host: packets to it are lost, connections to
// it are refused. A member that falls behind loses packets too (its
// buffer is full), as a UDP socket does. Every byte handed to the network
// is counted: packets by their sender, streams by the side that writes.
type memNet struct {
	mu    sync.Mutex
	nodes map[string]*memTransport // by "ip:port"
	port  int
	bytes atomic.Int64
	lost  atomic.Int64 // packets dropped: destination stopped or its buffer full
	// compress counts every packet and stream write at the size memberlist
	// would have sent with its compression on (wireSize), for members that
	// run with it off.
	compress bool
}

// size is what the network counts for b.
func (n *memNet) size(b []byte, packet bool) int64 {
	if !n.compress {
		return int64(len(b))
	}
	return int64(wireSize(b, packet))
}

// packetBuffer is how many packets a member may have queued unread.
const packetBuffer = 4096

// newTransport adds a member to the network with a fresh address.
func (n *memNet) newTransport() *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes == nil {
		n.nodes = map[string]*memTransport{}
		n.port = 10000
	}
	n.port++
	t := &memTransport{
		net:     n,
		addr:    &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: n.port},
		packets: make(chan *memberlist.Packet, packetBuffer),
		streams: make(chan net.Conn),
		stopped: make(chan struct{}),
	}
	n.nodes[t.addr.String()] = t
	return t
}

func (n *memNet) lookup(addr string) (*memTransport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.nodes[addr]
	if !ok {
		return nil, fmt.Errorf("no route to %s", addr)
	}
	return t, nil
}

// memTransport is one member's end of a memNet.
type memTransport struct {
	net     *memNet
	addr    *net.UDPAddr
	packets chan *memberlist.Packet
	streams chan net.Conn
	stopped chan struct{}
	stop    sync.Once
}

var _ memberlist.NodeAwareTransport = (*memTransport)(nil)

func (t *memTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.addr.IP, t.addr.Port, nil
}

func (t *memTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress delivers a packet, or loses it as a network would.
func (t *memTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	now := time.Now()
	t.net.bytes.Add(t.net.size(b, true))
	dest, err := t.net.lookup(a.Addr)
	if err != nil {
		return now, err
	}
	if dest.isStopped() {
		t.net.lost.Add(1)
		return now, nil
	}
	select {
	case dest.packets <- &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.addr, Timestamp: now}:
	default:
		t.net.lost.Add(1)
	}
	return now, nil
}

func (t *memTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *memTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

var errRefused = errors.New("connection refused")

// DialAddressTimeout opens a stream to a running member: the accepting
// side gets one end of a pipe, the caller the other, counted.
func (t *memTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	dest, err := t.net.lookup(a.Addr)
	if err != nil {
		return nil, err
	}
	if dest.isStopped() {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errRefused)
	}
	mine, theirs := net.Pipe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dest.streams <- &countingConn{Conn: theirs, net: t.net}:
		return &countingConn{Conn: mine, net: t.net}, nil
	case <-dest.stopped:
	case <-timer.C:
	}
	mine.Close()
	theirs.Close()
	return nil, fmt.Errorf("dial %s: %w", a.Addr, errRefused)
}

func (t *memTransport) StreamCh() <-chan net.Conn { return t.streams }

func (t *memTransport) isStopped() bool {
	select {
	case <-t.stopped:
		return true
	default:
		return false
	}
}

// Shutdown stops the member: from now on it is a dead host.
func (t *memTransport) Shutdown() error {
	t.stop.Do(func() { close(t.stopped) })
	return nil
}

// countingConn counts the bytes written on its end of a stream; the
// other end counts the other direction. memberlist writes each message
// of a stream (a state exchange, a user message) in one Write.
type countingConn struct {
	net.Conn
	net *memNet
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.net.bytes.Add(c.net.size(b[:n], false))
	return n, err
}

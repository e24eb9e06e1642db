package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Gossip over TLS. memberlist sends best-effort packets (probes, gossip)
// over UDP and reliable streams (push/pull, fallback probes, user messages)
// over TCP. TLS needs a connection, so this transport has no UDP socket:
//
//   - a stream is one TLS connection, as memberlist's own TCP streams are;
//   - packets to a peer go, length-prefixed, over one long-lived TLS
//     connection per peer, dialled on the first packet and closed after
//     packetIdle without one. A handshake per packet would cost a round
//     trip and an asymmetric signature for every probe; one connection per
//     peer keeps the cost of TLS to one handshake per peer and rotation.
//
// Packets stay best effort: WriteTo queues a packet for the peer's sender
// goroutine and returns at once, as a UDP send would, so that memberlist's
// probe and gossip loops never wait for a dial or a handshake; a full queue
// or a failed connection drops the packet, which memberlist tolerates.
//
// Every connection begins, inside TLS, with one byte saying what it
// carries; a packet connection then names the sender's advertised address
// (memberlist answers a packet's sender at its From address).
const (
	connStream byte = 's'
	connPacket byte = 'p'

	// maxPacket is memberlist's UDP receive buffer: no packet is larger.
	maxPacket = 65536
	// packetQueue bounds the packets waiting for one peer's connection.
	packetQueue = 256
	// packetIdle closes a peer's packet connection unused for this long;
	// the receiving side waits packetIdleRecv before it gives up on a
	// silent connection, so that it is the sender that closes normally.
	packetIdle     = 30 * time.Second
	packetIdleRecv = 2 * time.Minute
)

// tlsTransport is a memberlist.NodeAwareTransport over TLS connections.
type tlsTransport struct {
	creds   *tlsCreds
	ln      net.Listener
	timeout time.Duration // dial and handshake bound
	logger  *slog.Logger
	refused func(reason string)

	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	// ctx ends with Shutdown; done is its Done channel.
	ctx    context.Context
	cancel context.CancelFunc
	done   <-chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	advertise string // host:port, set by FinalAdvertiseAddr
	senders   map[string]*packetSender
	accepted  map[net.Conn]struct{} // incoming connections not yet handed to memberlist
	closed    bool
}

var _ memberlist.NodeAwareTransport = (*tlsTransport)(nil)

// newTLSTransport listens on addr ("ip:port", port 0 for any) for TLS
// connections from peers. timeout bounds dials and handshakes (memberlist's
// TCPTimeout); refused counts connections refused, by reason.
func newTLSTransport(addr string, creds *tlsCreds, timeout time.Duration, logger *slog.Logger, refused func(string)) (*tlsTransport, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &tlsTransport{
		creds:    creds,
		ln:       ln,
		timeout:  timeout,
		logger:   logger,
		refused:  refused,
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		ctx:      ctx,
		cancel:   cancel,
		done:     ctx.Done(),
		senders:  map[string]*packetSender{},
		accepted: map[net.Conn]struct{}{},
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.acceptLoop()
	}()
	return t, nil
}

// FinalAdvertiseAddr advertises the given address, completing a missing IP
// or port with the bound ones.
func (t *tlsTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	bound := t.ln.Addr().(*net.TCPAddr)
	adv := bound.IP
	if ip != "" {
		adv = net.ParseIP(ip)
		if adv == nil {
			return nil, 0, fmt.Errorf("cluster: bad advertise address %q", ip)
		}
	}
	if ip4 := adv.To4(); ip4 != nil {
		adv = ip4
	}
	if port == 0 {
		port = bound.Port
	}
	t.mu.Lock()
	t.advertise = net.JoinHostPort(adv.String(), strconv.Itoa(port))
	t.mu.Unlock()
	return adv, port, nil
}

func (t *tlsTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }
func (t *tlsTransport) StreamCh() <-chan net.Conn           { return t.streamCh }

func (t *tlsTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *tlsTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// WriteToAddress queues b for the peer's packet connection.
func (t *tlsTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if len(b) > maxPacket {
		return time.Time{}, fmt.Errorf("cluster: packet of %d bytes exceeds %d", len(b), maxPacket)
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return now, errors.New("cluster: transport shut down")
	}
	s := t.senders[a.Addr]
	if s == nil {
		s = &packetSender{t: t, addr: a.Addr, queue: make(chan []byte, packetQueue)}
		t.senders[a.Addr] = s
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			s.run()
		}()
	}
	select {
	case s.queue <- b:
		return now, nil
	default:
		return now, fmt.Errorf("cluster: packet queue to %s full", a.Addr)
	}
}

// DialAddressTimeout opens a stream: a TLS connection whose first byte
// says so.
func (t *tlsTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.dial(a.Addr, connStream, timeout)
}

// dial connects, handshakes and writes the connection kind (and, for
// packets, this node's address) within timeout.
func (t *tlsTransport) dial(addr string, kind byte, timeout time.Duration) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(t.ctx, timeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, t.creds.clientConfig())
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		t.refuse(err, "peer", addr, "dialled")
		return nil, fmt.Errorf("cluster: TLS handshake with %s: %w", addr, err)
	}
	hdr := []byte{kind}
	if kind == connPacket {
		t.mu.Lock()
		self := t.advertise
		t.mu.Unlock()
		hdr = append(hdr, byte(len(self)))
		hdr = append(hdr, self...)
	}
	deadline, _ := ctx.Deadline()
	conn.SetWriteDeadline(deadline)
	if _, err := conn.Write(hdr); err != nil {
		conn.Close()
		return nil, fmt.Errorf("cluster: opening connection to %s: %w", addr, err)
	}
	conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// refuse counts and logs a failed handshake: a timeout as "timeout", all
// else (unknown CA, expired, no certificate, not TLS at all) as "tls".
func (t *tlsTransport) refuse(err error, side, addr, how string) {
	select {
	case <-t.done:
		return // our own shutdown, not the peer's fault
	default:
	}
	reason := refusedTLS
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		reason = refusedTimeout
	}
	t.refused(reason)
	t.logger.Warn("gossip TLS handshake failed", side, addr, "connection", how, "reason", reason, "err", err)
}

func (t *tlsTransport) acceptLoop() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			t.logger.Error("gossip listener failed", "err", err)
			// A closed listener outside Shutdown: nothing more to accept.
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !t.track(c) {
			c.Close()
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serve(c)
		}()
	}
}

// serve handshakes an accepted connection and hands it on by kind. The
// connection is closed on return unless memberlist took it as a stream.
func (t *tlsTransport) serve(raw net.Conn) {
	handed := false
	defer func() { t.untrack(raw, !handed) }()
	conn := tls.Server(raw, t.creds.serverConfig())
	raw.SetDeadline(time.Now().Add(t.timeout))
	if err := conn.Handshake(); err != nil {
		t.refuse(err, "remote", raw.RemoteAddr().String(), "accepted")
		return
	}
	var kind [1]byte
	if _, err := io.ReadFull(conn, kind[:]); err != nil {
		t.refuse(err, "remote", raw.RemoteAddr().String(), "accepted")
		return
	}
	switch kind[0] {
	case connStream:
		// memberlist sets its own deadline on every stream it handles.
		raw.SetDeadline(time.Time{})
		select {
		case t.streamCh <- conn:
			handed = true
		case <-t.done:
		}
	case connPacket:
		t.readPackets(conn)
	default:
		t.refused(refusedMalformed)
		t.logger.Warn("gossip connection of unknown kind", "remote", raw.RemoteAddr(), "kind", kind[0])
	}
}

// readPackets delivers the packets of one incoming packet connection.
func (t *tlsTransport) readPackets(conn *tls.Conn) {
	remote := conn.RemoteAddr().String()
	from, err := readSender(conn)
	if err != nil {
		t.refused(refusedMalformed)
		t.logger.Warn("gossip packet connection without a valid sender address", "remote", remote, "err", err)
		return
	}
	var size [4]byte
	for {
		conn.SetReadDeadline(time.Now().Add(packetIdleRecv))
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return // the sender closed, idle, or shut down
		}
		n := binary.BigEndian.Uint32(size[:])
		if n == 0 || n > maxPacket {
			reason := refusedOversized
			if n == 0 {
				reason = refusedMalformed
			}
			t.refused(reason)
			t.logger.Warn("gossip packet of bad size; closing the connection", "remote", remote, "size", n)
			return
		}
		buf := make([]byte, n)
		conn.SetReadDeadline(time.Now().Add(t.timeout))
		if _, err := io.ReadFull(conn, buf); err != nil {
			t.refused(refusedMalformed)
			t.logger.Warn("gossip packet truncated", "remote", remote, "err", err)
			return
		}
		select {
		case t.packetCh <- &memberlist.Packet{Buf: buf, From: from, Timestamp: time.Now()}:
		case <-t.done:
			return
		}
	}
}

// readSender reads the sender's advertised address that opens a packet
// connection.
func readSender(r io.Reader) (net.Addr, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	b := make([]byte, n[0])
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	a, err := net.ResolveTCPAddr("tcp", string(b))
	if err != nil || a.IP == nil {
		return nil, fmt.Errorf("sender address %q: want ip:port", b)
	}
	return a, nil
}

func (t *tlsTransport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.accepted[c] = struct{}{}
	return true
}

func (t *tlsTransport) untrack(c net.Conn, closeIt bool) {
	t.mu.Lock()
	delete(t.accepted, c)
	t.mu.Unlock()
	if closeIt {
		c.Close()
	}
}

// Shutdown closes the listener and every incoming connection not handed to
// memberlist and waits for the transport's goroutines. Streams handed to
// memberlist are its own.
func (t *tlsTransport) Shutdown() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.cancel()
	for c := range t.accepted {
		c.Close()
	}
	t.mu.Unlock()
	err := t.ln.Close()
	t.wg.Wait()
	return err
}

// packetSender owns the packet connection to one peer.
type packetSender struct {
	t     *tlsTransport
	addr  string
	queue chan []byte
	conn  *tls.Conn
}

func (s *packetSender) run() {
	idle := time.NewTimer(packetIdle)
	defer idle.Stop()
	defer s.close()
	for {
		select {
		case <-s.t.done:
			return
		case <-idle.C:
			if s.retire() {
				return
			}
			idle.Reset(packetIdle)
		case b := <-s.queue:
			s.send(b)
			idle.Reset(packetIdle)
		}
	}
}

// retire removes an idle sender from the transport; false if a packet was
// queued meanwhile (WriteToAddress queues under the same lock).
func (s *packetSender) retire() bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if len(s.queue) > 0 {
		return false
	}
	delete(s.t.senders, s.addr)
	return true
}

// send writes one packet, dialling first if needed; on failure the packet
// is dropped and the next one dials again.
func (s *packetSender) send(b []byte) {
	if s.conn == nil {
		c, err := s.t.dial(s.addr, connPacket, s.t.timeout)
		if err != nil {
			s.t.logger.Debug("gossip packet dropped: no connection", "peer", s.addr, "err", err)
			return
		}
		s.conn = c
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	frame = append(frame, b...)
	s.conn.SetWriteDeadline(time.Now().Add(s.t.timeout))
	if _, err := s.conn.Write(frame); err != nil {
		s.t.logger.Debug("gossip packet dropped: write failed", "peer", s.addr, "err", err)
		s.close()
	}
}

func (s *packetSender) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
}

package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// testNet is a private /24 of loopback addresses (127.A.B.x) and one port
// shared by every node of a test, so that A records alone name the peers.
// The random A.B keeps concurrent tests and other packages' tests apart.
type testNet struct {
	prefix string // "127.A.B."
	port   int
}

func newTestNet(t *testing.T) testNet {
	t.Helper()
	for range 20 {
		prefix := fmt.Sprintf("127.%d.%d.", 1+rand.IntN(250), 1+rand.IntN(250))
		l, err := net.Listen("tcp", prefix+"1:0")
		if err != nil {
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		pc, err := net.ListenPacket("udp", net.JoinHostPort(prefix+"1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		pc.Close()
		return testNet{prefix: prefix, port: port}
	}
	t.Fatal("no free loopback address and port")
	return testNet{}
}

func (tn testNet) ip(i int) string   { return tn.prefix + strconv.Itoa(i) }
func (tn testNet) addr(i int) string { return net.JoinHostPort(tn.ip(i), strconv.Itoa(tn.port)) }

// fastTimings makes failure detection and gossip quick enough for tests
// while leaving slack for a loaded 2-core machine under -race.
func fastTimings(c *memberlist.Config) {
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.GossipInterval = 30 * time.Millisecond
	c.SuspicionMult = 3
	c.PushPullInterval = 2 * time.Second
	c.GossipToTheDeadTime = 2 * time.Second
	c.TCPTimeout = 2 * time.Second
}

func testLogger(t *testing.T, name string) *slog.Logger {
	if os.Getenv("SHOAL_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
}

// testConfig is node i of tn with fast timings and no rejoin.
func testConfig(tn testNet, i int) Config {
	cfg := DefaultConfig()
	cfg.NodeName = fmt.Sprintf("node-%02d", i)
	cfg.ListenAddr = tn.addr(i)
	cfg.HTTPAddr = net.JoinHostPort(tn.ip(i), "9940")
	cfg.RejoinInterval = 0
	cfg.Memberlist = fastTimings
	return cfg
}

type testNode struct {
	*Node
	reg *prometheus.Registry
}

// startNode creates and starts a node; the test's cleanup shuts it down.
func startNode(t *testing.T, cfg Config) testNode {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := New(cfg, testLogger(t, cfg.NodeName), reg)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.NodeName, err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatalf("Start(%s): %v", cfg.NodeName, err)
	}
	t.Cleanup(func() { n.Shutdown() })
	return testNode{Node: n, reg: reg}
}

// view renders what n sees as "name=state,..." sorted by name.
func view(n *Node) string {
	var parts []string
	for _, p := range n.Peers() {
		parts = append(parts, p.Name+"="+p.State.String())
	}
	return strings.Join(parts, ",")
}

// expectView is the view every node should have of the given nodes.
func expectView(states map[string]State) string {
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, n+"="+states[n].String())
	}
	return strings.Join(parts, ",")
}

// converged fails until every node has exactly the expected view.
func converged(nodes []testNode, want string) func() error {
	return func() error {
		for _, n := range nodes {
			if got := view(n.Node); got != want {
				return fmt.Errorf("%s sees %s, want %s", n.cfg.NodeName, got, want)
			}
		}
		return nil
	}
}

// dnsServer is a real DNS server on a loopback UDP port with mutable A and
// SRV records.
type dnsServer struct {
	addr string
	srv  *dns.Server

	mu   sync.Mutex
	a    map[string][]string // fqdn -> IPv4s
	srvs map[string][]*net.SRV
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{addr: pc.LocalAddr().String(), a: map[string][]string{}, srvs: map[string][]*net.SRV{}}
	started := make(chan struct{})
	d.srv = &dns.Server{PacketConn: pc, Handler: d, NotifyStartedFunc: func() { close(started) }}
	go d.srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { d.srv.Shutdown() })
	return d
}

func (d *dnsServer) setA(name string, ips ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.a[dns.Fqdn(name)] = ips
}

func (d *dnsServer) setSRV(name string, srvs ...*net.SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.srvs[dns.Fqdn(name)] = srvs
}

func (d *dnsServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range r.Question {
		name := strings.ToLower(q.Name)
		as, haveA := d.a[name]
		srvs, haveSRV := d.srvs[name]
		if !haveA && !haveSRV {
			m.Rcode = dns.RcodeNameError
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 0}
		switch q.Qtype {
		case dns.TypeA:
			for _, ip := range as {
				h := hdr
				h.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: h, A: net.ParseIP(ip).To4()})
			}
		case dns.TypeSRV:
			for _, s := range srvs {
				h := hdr
				h.Rrtype = dns.TypeSRV
				m.Answer = append(m.Answer, &dns.SRV{Hdr: h, Priority: s.Priority, Weight: s.Weight, Port: s.Port, Target: dns.Fqdn(s.Target)})
			}
		}
	}
	w.WriteMsg(m)
}

// waitCtx is a context for WaitReady with a generous deadline.
func waitCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func encodeMeta(state State, httpAddr string, start time.Time, lamport uint64) []byte {
	return encodeMetaWith(state, httpAddr, start, lamport, Watermarks{})
}

func encodeMetaWith(state State, httpAddr string, start time.Time, lamport uint64, wm Watermarks) []byte {
	return encodeMetaKube(state, httpAddr, "", start, lamport, wm)
}

func encodeMetaKube(state State, httpAddr, kubeNode string, start time.Time, lamport uint64, wm Watermarks) []byte {
	return encodeMetaFull(state, httpAddr, kubeNode, start, lamport, wm, ConfigIDs{}, nil)
}

func encodeMetaFull(state State, httpAddr, kubeNode string, start time.Time, lamport uint64, wm Watermarks, cfg ConfigIDs, carried []Carry) []byte {
	return nodeMeta{
		Carried:         carriedMeta(carried),
		State:           state.String(),
		HTTPAddr:        httpAddr,
		KubeNode:        kubeNode,
		StartTime:       start.UnixMilli(),
		Lamport:         lamport,
		FencedSeq:       wm.FencedSeq,
		FencedRing:      wm.FencedRing,
		AckedSeq:        wm.AckedSeq,
		FencedPlacement: wm.FencedPlacement,
		LostSeq:         wm.LostSeq,
		Features:        featureLostSeq,
		ConfigCur:       cfg.Cur,
		ConfigPrev:      cfg.Prev,
	}.marshal()
}

package cluster

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/shoal-dev/shoal/discoveryerr"
)

// An update's delivery is waited for announceRounds times the gossip
// rounds memberlist needs to send it (see announceWait), doubling up to
// announceMaxBackoff times that after each wait that ran out.
const (
	announceRounds     = 4
	announceMaxBackoff = 8
)

// Replacements for memberlist's LAN defaults (4 and 30s); see
// memberlistConfig.
const (
	defaultRetransmitMult   = 6
	defaultPushPullInterval = 10 * time.Second
)

// Peer is one alive member of the cluster as seen by this node.
type Peer struct {
	Name     string
	Addr     string // gossip address, host:port
	HTTPAddr string // advertised HTTP address; empty if the peer set none
	// KubeNode is the Kubernetes node the peer runs on (Config.KubeNode);
	// empty if it set none.
	KubeNode  string
	State     State
	Self      bool
	StartTime time.Time
	// Handoff is the peer's hand-off progress (zero from older versions).
	Handoff Watermarks
	// Carried lists the backlogs of departed nodes the peer still has to
	// deliver (SetCarried).
	Carried []Carry
	// ScrapeConfig is the scrape configuration the peer runs and the one it
	// still places by (zero from older versions).
	ScrapeConfig ConfigIDs
	// Capabilities are the peer's Config.Capabilities (zero from older
	// versions).
	Capabilities uint64

	metaSeq uint64 // nodeMeta.Seq of what this node holds (metapush.go)
	pushes  bool   // the peer reads metadata pushes
	deltas  bool   // the peer reads weight deltas and summaries (weightsdelta.go)
}

// same reports whether p and o say the same of a peer, field by field
// (TestPeerSameComparesEveryField keeps it complete).
func (p Peer) same(o Peer) bool {
	return p.Name == o.Name && p.Addr == o.Addr && p.HTTPAddr == o.HTTPAddr &&
		p.KubeNode == o.KubeNode && p.State == o.State && p.Self == o.Self &&
		p.StartTime.Equal(o.StartTime) && p.Handoff == o.Handoff &&
		slices.Equal(p.Carried, o.Carried) && p.ScrapeConfig == o.ScrapeConfig && p.Capabilities == o.Capabilities &&
		p.metaSeq == o.metaSeq && p.pushes == o.pushes && p.deltas == o.deltas
}

// Node is this process's membership in the cluster.
type Node struct {
	cfg        Config
	logger     *slog.Logger
	metrics    *metrics
	listenIP   net.IP
	listenPort int
	disc       *discoverer
	tlsCreds   *tlsCreds // nil without gossip TLS (tls.go)
	startTime  time.Time
	lamport    atomic.Uint64

	mu         sync.Mutex
	state      State
	metaClock  uint64 // lamport value of the last local state change
	watermarks Watermarks
	carried    []Carry
	configIDs  ConfigIDs
	advertised []byte        // metadata memberlist last advertised for this node
	announcing bool          // an announcer goroutine owns this node's UpdateNode calls
	reannounce bool          // metadata changed while announcing
	stopCh     chan struct{} // closed by Shutdown
	advertise  string        // final gossip address, set by Start
	ml         *memberlist.Memberlist
	started    bool
	left       bool
	stopped    bool
	peers      map[string]Peer        // other alive members, by name
	conflict   Conflict               // the last name conflict memberlist reported
	ownWeights NodeWeights            // this node's published weights (weights.go)
	weights    map[string]NodeWeights // other members' published weights
	gone       map[string]time.Time   // when members with a weight set left
	early      map[string]earlyPush   // pushes from members memberlist has not reported (metapush.go)
	departed   map[string]Departure   // members that left, their last state (departed.go)
	discErrs   discoveryerr.Recorder  // has its own lock
	subs       map[int]chan struct{}
	nextSub    int
	ready      bool
	readyCh    chan struct{}
	readyTimer *time.Timer
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	// weightsSend signals sendWeightsLoop that ownWeights changed.
	weightsSend chan struct{}
	// weightsSent is the own set as last sent to the peers that read
	// deltas: the base of the next delta (weightsdelta.go).
	weightsSent NodeWeights
	// repair holds the weight sets this node asks peers for, and those
	// peers asked of it; repairKick signals repairWeightsLoop.
	repair     weightsRepair
	repairKick chan struct{}
	// metaSeq counts this node's metadata changes (nodeMeta.Seq), under
	// mu; metaSend signals sendMetaLoop (metapush.go).
	metaSeq  uint64
	metaSend chan struct{}

	// memberlist's gossip interval, fan-out and retransmit multiplier, set
	// by Start (announceWait).
	gossipRound  time.Duration
	gossipFanout int
	gossipMult   int

	// The cluster remembered between runs (snapshot.go, startupwait.go).
	remembered   []string      // remembered members' addresses, joined on start
	startup      *startupWait  // under mu; nil without remembered participants or with WaitForSize
	silenceTimer *time.Timer   // under mu; ends startup's silence
	startSettled bool          // under mu; Start decided whether to wait
	snapKick     chan struct{} // signals snapshotLoop
	snapMu       sync.Mutex    // orders snapshot writes
	snapWritten  []byte        // under snapMu: the member set last written
}

// New validates cfg and prepares a Node; nothing is bound until Start. The
// node starts as a Viewer. Its metrics are registered on reg (which may be
// nil) and unregistered by Shutdown; a registration error is returned.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Node, error) {
	listenIP, listenPort, specs, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg:        cfg,
		logger:     logger,
		listenIP:   listenIP,
		listenPort: listenPort,
		// As the metadata carries it (milliseconds), so that this node's
		// Self and its peers' view of it name the same life.
		startTime:   time.UnixMilli(time.Now().UnixMilli()),
		state:       Viewer,
		peers:       map[string]Peer{},
		weights:     map[string]NodeWeights{},
		gone:        map[string]time.Time{},
		early:       map[string]earlyPush{},
		departed:    map[string]Departure{},
		subs:        map[int]chan struct{}{},
		weightsSend: make(chan struct{}, 1),
		repairKick:  make(chan struct{}, 1),
		metaSend:    make(chan struct{}, 1),
		snapKick:    make(chan struct{}, 1),
		readyCh:     make(chan struct{}),
		stopCh:      make(chan struct{}),
	}
	n.disc = &discoverer{
		specs:      specs,
		resolver:   cfg.Resolver,
		listenPort: listenPort,
		onError: func(method string, err error) {
			n.metrics.discoveryErrs.WithLabelValues(method).Inc()
			n.discErrs.Fail(discoveryerr.Peers, method, err.Error(), time.Now())
			n.logger.Warn("peer discovery failed", "method", method, "err", err)
		},
		onSuccess: func(method string) { n.discErrs.OK(discoveryerr.Peers, method) },
	}
	if cfg.KubernetesLabelSelector != "" {
		if _, err := labels.Parse(cfg.KubernetesLabelSelector); err != nil {
			return nil, fmt.Errorf("cluster: Kubernetes label selector %q: %w", cfg.KubernetesLabelSelector, err)
		}
		kc, ns, err := newKubeClient(cfg)
		if err != nil {
			return nil, err
		}
		n.disc.kube, n.disc.namespace, n.disc.selector = kc, ns, cfg.KubernetesLabelSelector
	}
	n.metrics, err = newMetrics(reg, cfg.ClusterName,
		func() float64 { return float64(n.lamport.Load()) },
		func() float64 {
			if ml := n.memberlist(); ml != nil {
				return float64(ml.GetHealthScore())
			}
			return 0
		},
		func() float64 {
			if ml := n.memberlist(); ml != nil {
				return float64(ml.NumMembers())
			}
			return 0
		},
	)
	if err != nil {
		return nil, err
	}
	if err := n.loadTLS(); err != nil {
		n.metrics.unregister()
		return nil, err
	}
	n.metrics.setState(Viewer)
	n.metrics.minimumSize.Set(float64(cfg.WaitForSize))
	n.updatePeerMetrics()
	n.remember(n.loadSnapshot())
	if cfg.WaitForSize == 0 && n.startup == nil && len(specs) == 0 && cfg.KubernetesLabelSelector == "" {
		// Nobody to join and nobody remembered: a cluster of one.
		n.markReady("wait-for-size is 0")
	}
	return n, nil
}

func (n *Node) memberlist() *memberlist.Memberlist {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ml
}

// Start binds the gossip listener, joins the peers that discovery finds (or
// bootstraps a cluster of one if none answers) and returns. A goroutine then
// re-runs discovery every RejoinInterval until ctx is done or Shutdown is
// called. The WaitTimeout clock starts here.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	if n.started || n.stopped {
		n.mu.Unlock()
		return errors.New("cluster: node already started or shut down")
	}
	n.started = true
	n.mu.Unlock()

	mlc, err := n.memberlistConfig(ctx)
	if err != nil {
		return err
	}
	if err := n.useTLS(mlc); err != nil {
		return fmt.Errorf("cluster: starting gossip over TLS on %s: %w", n.cfg.ListenAddr, err)
	}
	ml, err := memberlist.Create(mlc)
	if err != nil {
		if mlc.Transport != nil {
			mlc.Transport.Shutdown()
		}
		return fmt.Errorf("cluster: starting memberlist on %s: %w", n.cfg.ListenAddr, err)
	}
	local := ml.LocalNode()
	advertise := net.JoinHostPort(local.Addr.String(), strconv.Itoa(int(local.Port)))

	loopCtx, cancel := context.WithCancel(ctx)
	n.mu.Lock()
	n.ml = ml
	n.advertise = advertise
	n.gossipRound, n.gossipFanout, n.gossipMult = mlc.GossipInterval, max(mlc.GossipNodes, 1), max(mlc.RetransmitMult, 1)
	n.cancel = cancel
	if !n.ready {
		n.readyTimer = time.AfterFunc(n.cfg.WaitTimeout, func() { n.markReady("wait timeout passed") })
	}
	if n.startup != nil {
		n.startup.since = time.Now()
	}
	n.mu.Unlock()
	n.metrics.broadcasts.WithLabelValues("join").Inc()
	n.logger.Info("gossip started", "node", n.cfg.NodeName, "listen", n.cfg.ListenAddr, "advertise", advertise, "cluster_name", n.cfg.ClusterName, "encryption", n.Encryption())

	n.settleStartupWait(n.join(loopCtx, true))
	n.checkReady()
	n.notify()

	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.sendWeightsLoop(loopCtx)
	}()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.repairWeightsLoop(loopCtx)
	}()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.sendMetaLoop(loopCtx)
	}()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.snapshotLoop(loopCtx)
	}()
	if n.cfg.RejoinInterval > 0 || n.waitingForCluster() {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.rejoinLoop(loopCtx)
		}()
	}
	return nil
}

func (n *Node) memberlistConfig(ctx context.Context) (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	// Each node relays a gossip message RetransmitMult*ceil(log10(N+1))
	// times to random peers, so a peer misses it with probability about
	// e^-(RetransmitMult*ceil(log10(N+1))). With the default 4, a rollout of
	// 50 nodes leaves some peer with a stale state about half the time, until
	// the periodic full state exchange repairs it (30s, doubled above 32
	// nodes). A stale state means a wrong ring, so shoal relays more and
	// exchanges state more often; both cost little.
	c.RetransmitMult = defaultRetransmitMult
	c.PushPullInterval = defaultPushPullInterval
	if n.cfg.Memberlist != nil {
		n.cfg.Memberlist(c)
	}
	c.Name = n.cfg.NodeName
	c.BindAddr = n.listenIP.String()
	c.BindPort = n.listenPort
	advHost, advPort := "", n.listenPort
	if n.cfg.AdvertiseAddr != "" {
		h, p, err := splitAdvertise(n.cfg.AdvertiseAddr, n.listenPort)
		if err != nil {
			return nil, err
		}
		advHost, advPort = h, p
		if net.ParseIP(h) == nil {
			lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
			ips, err := n.cfg.Resolver.LookupIPAddr(lctx, h)
			cancel()
			if err != nil || len(ips) == 0 {
				return nil, fmt.Errorf("cluster: resolving advertise address %q: %v", n.cfg.AdvertiseAddr, err)
			}
			advHost = ips[0].IP.String()
		}
	} else {
		advHost = defaultAdvertiseIP(n.listenIP).String()
	}
	c.AdvertiseAddr = advHost
	// An HTTP address without a host (":9940", "0.0.0.0:9940") is completed
	// with the advertised gossip host: that is where peers can reach us.
	if h, p, err := net.SplitHostPort(n.cfg.HTTPAddr); err == nil && (h == "" || net.ParseIP(h).IsUnspecified()) {
		n.mu.Lock()
		n.cfg.HTTPAddr = net.JoinHostPort(advHost, p)
		n.mu.Unlock()
	}
	// With an automatic listen port and no explicit advertise port,
	// memberlist advertises the port it bound.
	c.AdvertisePort = advPort
	c.Label = n.cfg.ClusterName
	c.SecretKey = n.cfg.SecretKey
	c.Keyring = nil
	c.Delegate = (*delegate)(n)
	c.Events = (*events)(n)
	c.Conflict = (*conflicts)(n)
	c.LogOutput = nil
	c.Logger = newMemberlistLogger(n.logger, n.metrics.refused)
	return c, nil
}

// join discovers candidate peers (with remembered, also the members
// remembered from the last run) and joins every one that is not already a
// member. It returns how many joins succeeded, and the addresses that
// failed.
func (n *Node) join(ctx context.Context, remembered bool) (int, []string) {
	ml := n.memberlist()
	if ml == nil {
		return 0, nil
	}
	addrs := n.disc.discover(ctx)
	if remembered {
		addrs = mergeAddrs(addrs, n.remembered)
	}
	joined := 0
	var failed []string
	for _, a := range addrs {
		if ctx.Err() != nil {
			break
		}
		// After a successful join the push/pull has merged the whole remote
		// cluster, so the remaining addresses are usually members already.
		if n.isMemberAddr(a) {
			continue
		}
		if _, err := ml.Join([]string{a}); err != nil {
			n.startupJoinFailed(a)
			failed = append(failed, a)
			n.metrics.joins.WithLabelValues("failure").Inc()
			n.logger.Debug("joining peer failed", "addr", a, "err", err)
			continue
		}
		n.metrics.joins.WithLabelValues("success").Inc()
		joined++
	}
	if joined > 0 {
		n.logger.Info("joined peers", "joined", joined, "candidates", len(addrs), "members", len(n.Peers()))
	}
	return joined, failed
}

// isMemberAddr reports whether addr is this node or a known alive member.
func (n *Node) isMemberAddr(addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == n.advertise {
		return true
	}
	if !n.listenIP.IsUnspecified() && addr == net.JoinHostPort(n.listenIP.String(), strconv.Itoa(n.listenPort)) {
		return true
	}
	for _, p := range n.peers {
		if p.Addr == addr {
			return true
		}
	}
	return false
}

func (n *Node) rejoinLoop(ctx context.Context) {
	backoff := time.Second
	for {
		delay := n.cfg.RejoinInterval
		waiting := n.waitingForCluster()
		switch {
		case waiting:
			delay = startupRetry
		case delay == 0:
			return // re-joining is disabled; the loop ran for the startup wait
		case n.alone() && backoff < delay:
			// Peers that start together often miss each other in DNS; a
			// lone node retries sooner than the full interval.
			delay = backoff
			backoff *= 2
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		n.join(ctx, waiting)
		if waiting {
			n.checkReady()
		}
	}
}

func (n *Node) alone() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.peers) == 0
}

// SetState changes this node's state and queues the change for gossip; it
// does not wait for delivery. A node cannot leave Terminating.
func (n *Node) SetState(s State) error {
	if !s.valid() {
		return fmt.Errorf("cluster: invalid node state %d", int(s))
	}
	n.mu.Lock()
	if n.state == s {
		n.mu.Unlock()
		return nil
	}
	if n.state == Terminating {
		n.mu.Unlock()
		return fmt.Errorf("cluster: cannot change state from terminating to %s", s)
	}
	old := n.state
	n.state = s
	n.metaClock = n.lamport.Add(1)
	n.metaSeq++
	ml, left := n.ml, n.left || n.stopped
	n.mu.Unlock()

	n.logger.Info("node state changed", "from", old, "to", s)
	n.metrics.setState(s)
	n.afterChange()
	if ml != nil && !left {
		n.broadcastState(ml)
	}
	return nil
}

// SetWatermarks publishes this node's hand-off progress in its metadata; it
// does not wait for delivery.
func (n *Node) SetWatermarks(w Watermarks) {
	n.mu.Lock()
	if n.watermarks == w {
		n.mu.Unlock()
		return
	}
	n.watermarks = w
	n.metaSeq++
	ml, left := n.ml, n.left || n.stopped
	n.mu.Unlock()
	n.afterChange()
	if ml != nil && !left {
		n.broadcastState(ml)
	}
}

// SetCarried publishes the backlogs of departed nodes this node holds
// undelivered (package handover). It refuses a list that would not fit in
// the node metadata; then nothing changes. It does not wait for delivery.
func (n *Node) SetCarried(cs []Carry) error {
	n.mu.Lock()
	if slices.Equal(n.carried, cs) {
		n.mu.Unlock()
		return nil
	}
	old := n.carried
	n.carried = slices.Clone(cs)
	n.metaSeq++
	if size := len(n.metaLocked()); size > memberlist.MetaMaxSize {
		n.carried = old
		n.metaSeq--
		n.mu.Unlock()
		return fmt.Errorf("cluster: %d carried backlogs do not fit in the node metadata (%d bytes, at most %d)", len(cs), size, memberlist.MetaMaxSize)
	}
	ml, left := n.ml, n.left || n.stopped
	n.mu.Unlock()
	n.afterChange()
	if ml != nil && !left {
		n.broadcastState(ml)
	}
	return nil
}

// SetScrapeConfig publishes which scrape configuration this node runs and
// places by in its metadata; it does not wait for the gossip.
func (n *Node) SetScrapeConfig(ids ConfigIDs) {
	n.mu.Lock()
	if n.configIDs == ids {
		n.mu.Unlock()
		return
	}
	n.configIDs = ids
	n.metaSeq++
	ml, left := n.ml, n.left || n.stopped
	n.mu.Unlock()
	n.afterChange()
	if ml != nil && !left {
		n.broadcastState(ml)
	}
}

// broadcastState has memberlist advertise the current metadata; it does not
// wait. One announcer goroutine owns this node's UpdateNode calls, one at a
// time: two concurrent calls may take their incarnations in the other order
// than their metadata, and memberlist then keeps the older metadata under
// the higher incarnation and never reports the newer one delivered.
//
// memberlist v0.7.0's broadcast queue can silently drop a queued message:
// it restarts its ids whenever it is empty for an instant, and a later
// message with the same id, size and transmit count replaces an older one
// (upstream hashicorp/memberlist#263). An own update dropped that way
// reaches no peer until the next full state exchange (10s, 20s above 32
// members), and memberlist never reports its delivery. On a loaded
// machine, during a cold start of 10 replicas, that happened to several
// nodes' fence announcements and held every gained target back until the
// state exchange. So the announcer waits for each update's delivery for a
// bound derived from the gossip settings and sends it again when that runs
// out.
func (n *Node) broadcastState(ml *memberlist.Memberlist) {
	n.kickMetaPush()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.announcing {
		n.reannounce = true
		return
	}
	if n.stopped || n.left {
		return
	}
	n.announcing = true
	// Under n.mu with stopped false: Shutdown's Wait comes after this Add.
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.announce(ml)
	}()
}

// announceWait is how long an update's delivery is waited for before it
// is sent again: announceRounds times the gossip rounds memberlist needs
// to send it as often as it does (RetransmitMult × ⌈log10(N+1)⌉ sends,
// GossipNodes per round), times backoff. At the defaults and 50 members:
// 12 sends, 4 rounds of 200ms, a first wait of 3.2s.
func (n *Node) announceWait(members, backoff int) time.Duration {
	sends := n.gossipMult * int(math.Ceil(math.Log10(float64(members+1))))
	rounds := (max(sends, 1) + n.gossipFanout - 1) / n.gossipFanout
	return time.Duration(announceRounds*rounds*backoff) * n.gossipRound
}

// UpdateBound is how long an update of this node's metadata may take to
// reach every alive peer when its direct push is lost: its gossip may wait
// behind the previous update for one announce wait, and memberlist sends
// it as often as it does within another. Peers' updates reach this node
// within the same bound (every member runs the same settings), which is
// what makes a peer's announcement older than it safe to rely on.
func (n *Node) UpdateBound() time.Duration {
	members := 1
	if ml := n.memberlist(); ml != nil {
		members = ml.NumMembers()
	}
	return 2 * n.announceWait(members, 1)
}

// updater is what announce needs of memberlist.
type updater interface {
	UpdateNode(timeout time.Duration) error
	NumMembers() int
}

// announce runs UpdateNode until memberlist has delivered the current
// metadata: what changed while an update was being sent goes next, and an
// update whose delivery is not reported within announceWait is sent again,
// waiting twice as long each time, until a wait of announceMaxBackoff
// times the first has run out too. Then the gossip queue is congested,
// not lossy: memberlist reports delivery once it has relayed the update as
// often as it does, which behind a queue of every member's news (a cold
// start of a thousand members) takes minutes, and every resend is news
// that every member relays again. Resending for as long as that lasts
// kept a thousand members' gossip saturated for good. The update reached
// the peers by push already; the state exchange repairs what both lost.
func (n *Node) announce(ml updater) {
	backoff, event := 1, "update"
	for {
		n.mu.Lock()
		n.reannounce = false
		n.mu.Unlock()
		n.metrics.broadcasts.WithLabelValues(event).Inc()
		wait := n.announceWait(ml.NumMembers(), backoff)
		sent := make(chan error, 1)
		// UpdateNode queues the update, then waits for its delivery (at
		// once when no peer is alive). The wait has no cancellation but its
		// own bound, so Shutdown does not wait for it.
		go func() { sent <- ml.UpdateNode(wait) }()
		var err error
		select {
		case err = <-sent:
		case <-n.stopCh:
		}
		// Not delivered in time: lost, or behind other news in the queue.
		// Sent again, waiting longer, unless the longest wait ran out.
		congested := err != nil && backoff == announceMaxBackoff
		if err != nil {
			backoff, event = min(2*backoff, announceMaxBackoff), "resend"
		} else {
			backoff, event = 1, "update"
		}
		n.mu.Lock()
		// memberlist drops a local update whose incarnation a concurrent
		// refutation has just overtaken (the refutation re-sends the old
		// metadata): then what it advertises is stale and the loop sends
		// the update again.
		stale := !bytes.Equal(n.advertised, n.metaLocked())
		done := n.stopped || n.left || (!n.reannounce && !stale && (err == nil || congested))
		if done {
			n.announcing = false
		}
		n.mu.Unlock()
		if done {
			return
		}
	}
}

// Self returns this node as a Peer.
func (n *Node) Self() Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.selfLocked()
}

func (n *Node) selfLocked() Peer {
	addr := n.advertise
	if addr == "" {
		addr = n.cfg.ListenAddr
	}
	return Peer{
		Name:      n.cfg.NodeName,
		Addr:      addr,
		HTTPAddr:  n.cfg.HTTPAddr,
		KubeNode:  n.cfg.KubeNode,
		State:     n.state,
		Self:      true,
		StartTime: n.startTime,
		Handoff:   n.watermarks,
		Carried:   slices.Clone(n.carried),
		// What this node announces, as peers see it.
		ScrapeConfig: n.configIDs,
		Capabilities: n.cfg.Capabilities,
	}
}

// Peers returns the alive members, this node included, sorted by name.
// Members declared dead or that left are not included.
func (n *Node) Peers() []Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]Peer, 0, len(n.peers)+1)
	out = append(out, n.selfLocked())
	for _, p := range n.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Subscribe returns a channel that receives a signal whenever the member
// set or any member's state or metadata changes, and a function that ends
// the subscription. The channel holds one pending signal, so a burst of
// changes coalesces into one; on a signal, call Peers.
func (n *Node) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	id := n.nextSub
	n.nextSub++
	n.subs[id] = ch
	n.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			n.mu.Lock()
			delete(n.subs, id)
			n.mu.Unlock()
		})
	}
}

func (n *Node) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// afterChange refreshes what depends on the member set.
func (n *Node) afterChange() {
	n.updatePeerMetrics()
	n.checkReady()
	n.notify()
	n.snapshotChanged()
	n.kickRepair() // a request may wait for a peer that has just joined
}

// updatePeerMetrics counts under the lock rather than through Peers: it
// runs on every membership event and every metadata update, and copying
// and sorting every peer each time made a cluster of N members do N² work
// per round of updates.
func (n *Node) updatePeerMetrics() {
	counts := map[State]int{}
	n.mu.Lock()
	counts[n.state]++
	for _, p := range n.peers {
		counts[p.State]++
	}
	n.mu.Unlock()
	for _, s := range States {
		n.metrics.peers.WithLabelValues(s.String()).Set(float64(counts[s]))
	}
}

// Ready reports whether WaitForSize participants have been seen or
// WaitTimeout has passed since Start. Once true it stays true.
func (n *Node) Ready() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ready
}

// WaitReady blocks until Ready is true or ctx is done.
func (n *Node) WaitReady(ctx context.Context) error {
	select {
	case <-n.readyCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Node) checkReady() {
	n.mu.Lock()
	if n.ready {
		n.mu.Unlock()
		return
	}
	if n.cfg.WaitForSize == 0 {
		if n.startup == nil && !n.startSettled {
			n.mu.Unlock()
			return // Start has not decided yet whether to wait
		}
		done, why := n.startupDecideLocked()
		n.mu.Unlock()
		if done {
			n.markReady(why)
		}
		return
	}
	// Viewers count: a node stays a viewer (off the ring) until it is ready,
	// so counting only participants would never let a new cluster start.
	count := 0
	if n.state != Terminating {
		count++
	}
	for _, p := range n.peers {
		if p.State != Terminating {
			count++
		}
	}
	n.mu.Unlock()
	if count >= n.cfg.WaitForSize {
		n.markReady(fmt.Sprintf("%d members seen", count))
	}
}

func (n *Node) markReady(reason string) {
	n.mu.Lock()
	if n.ready {
		n.mu.Unlock()
		return
	}
	n.ready = true
	// The gauge before the channel: a WaitReady caller may read it at once.
	n.metrics.ready.Set(1)
	close(n.readyCh)
	if n.readyTimer != nil {
		n.readyTimer.Stop()
	}
	if n.silenceTimer != nil {
		n.silenceTimer.Stop()
	}
	implicit := n.startup != nil
	n.mu.Unlock()
	if n.cfg.WaitForSize > 0 || implicit {
		n.logger.Info("cluster ready for traffic", "reason", reason, "wait_for_size", n.cfg.WaitForSize)
	}
}

// Leave sends this node's last metadata to every peer (pushFinal, for at
// most half of timeout), then gossips that it is leaving and waits for the
// rest of timeout for that message to go out. Call SetState(Terminating)
// first, and Shutdown after.
func (n *Node) Leave(timeout time.Duration) error {
	n.mu.Lock()
	ml := n.ml
	already := n.left || n.stopped
	final, ok := n.pendingMetaLocked()
	n.left = true
	n.mu.Unlock()
	if ml == nil || already {
		return nil
	}
	begin := time.Now()
	if ok && len(final.to) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), timeout/2)
		n.pushFinal(ctx, ml, final)
		cancel()
	}
	timeout -= time.Since(begin)
	n.metrics.broadcasts.WithLabelValues("leave").Inc()
	if err := ml.Leave(timeout); err != nil {
		return fmt.Errorf("cluster: leaving: %w", err)
	}
	n.logger.Info("left the cluster")
	return nil
}

// Shutdown stops the rejoin loop and the gossip listener and unregisters the
// node's metrics. Without a prior Leave, peers declare this node dead after
// their failure detection.
func (n *Node) Shutdown() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	close(n.stopCh)
	ml, cancel := n.ml, n.cancel
	if n.readyTimer != nil {
		n.readyTimer.Stop()
	}
	if n.silenceTimer != nil {
		n.silenceTimer.Stop()
	}
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	n.wg.Wait()
	defer n.metrics.unregister()
	if ml == nil {
		return nil
	}
	// The last record: who was alive at the end, and whether this node left.
	n.writeSnapshot()
	if err := ml.Shutdown(); err != nil {
		return fmt.Errorf("cluster: shutting down memberlist: %w", err)
	}
	return nil
}

// observe records a peer's metadata; it runs inside memberlist's event
// callbacks, so it must not call back into memberlist.
func (n *Node) observe(mn *memberlist.Node, event string) {
	if mn.Name == n.cfg.NodeName {
		// Our own state is authoritative locally (memberlist refutes stale
		// news about us with a higher incarnation); remember only what
		// memberlist advertises for us.
		n.mu.Lock()
		n.advertised = bytes.Clone(mn.Meta)
		n.mu.Unlock()
		return
	}
	n.metrics.receivedEvents.WithLabelValues(event).Inc()
	addr := net.JoinHostPort(mn.Addr.String(), strconv.Itoa(int(mn.Port)))
	m, st, err := decodeMeta(mn.Meta)
	if err != nil {
		n.metrics.badMeta.Inc()
		n.logger.Warn("peer sent metadata this node cannot read; treating it as a viewer", "peer", mn.Name, "addr", addr, "err", err)
		m, st = nodeMeta{}, Viewer
	}
	n.apply(mn.Name, addr, m, st, event)
}

// apply records a peer's metadata, from gossip or a push (event
// eventPush, addr empty). Metadata older than what this node holds of the
// same life of the peer (nodeMeta.Seq) leaves the peer's state as it is:
// the two paths may deliver out of order. A push never changes membership:
// one from a peer this node does not hold, or from another life of it, is
// only kept until memberlist reports that life (keepEarlyPushLocked;
// checked under the lock, so a push racing the peer's departure cannot
// bring it back).
func (n *Node) apply(name, addr string, m nodeMeta, st State, event string) {
	p := peerFrom(name, addr, m, st)
	if m.Version == metaVersion {
		n.mergeLamport(m.Lamport)
	}
	n.mu.Lock()
	old, had := n.peers[p.Name]
	if event == eventPush {
		if !had {
			if sameLife, taken := n.updateDepartureLocked(p); sameLife {
				n.mu.Unlock()
				if taken {
					n.metrics.receivedEvents.WithLabelValues(eventPush).Inc()
					n.notify()
				}
				return
			}
		}
		if !had || !old.StartTime.Equal(p.StartTime) || p.StartTime.IsZero() {
			n.keepEarlyPushLocked(p, m, st)
			n.mu.Unlock()
			return
		}
		p.Addr = old.Addr
		n.metrics.receivedEvents.WithLabelValues(eventPush).Inc()
	} else if e, ok := n.early[p.Name]; ok && !e.peer.StartTime.After(p.StartTime) {
		// Consumed by this life, or stale; a push of a later life waits
		// for memberlist to report that life.
		delete(n.early, p.Name)
		if e.peer.StartTime.Equal(p.StartTime) && e.peer.metaSeq > p.metaSeq && time.Since(e.at) <= earlyKeep {
			n.metrics.receivedEvents.WithLabelValues(eventPush).Inc()
			p = peerFrom(name, addr, e.meta, e.peer.State)
		}
	}
	if had && old.StartTime.Equal(p.StartTime) && p.metaSeq < old.metaSeq {
		old.Addr = p.Addr // memberlist's news of where the peer is stays current
		p = old
	}
	n.peers[p.Name] = p
	if (!had || !old.StartTime.Equal(p.StartTime)) && n.ownWeights.Version > 0 {
		// A publication sent while the peer was not known yet (its join
		// still in gossip here) never reached it: send the set as it is now.
		n.repair.addGive(p.Name, n.cfg.NodeName)
	}
	delete(n.gone, p.Name)
	delete(n.departed, p.Name)
	n.pruneWeightsLocked(time.Now())
	n.mu.Unlock()
	if had && old.same(p) {
		// Most metadata arrives twice, by push and by gossip: the second
		// copy changes nothing, and waking every subscriber for it would
		// double the work of every update.
		return
	}
	if !had || old.State != p.State {
		n.logger.Debug("peer state", "peer", p.Name, "addr", p.Addr, "state", p.State, "event", event)
	}
	n.afterChange()
}

// peerFrom is the peer that metadata m (state st) describes.
func peerFrom(name, addr string, m nodeMeta, st State) Peer {
	p := Peer{Name: name, Addr: addr, State: st, HTTPAddr: m.HTTPAddr, KubeNode: m.KubeNode}
	if m.Version == metaVersion {
		p.StartTime = time.UnixMilli(m.StartTime)
		p.Handoff = m.watermarks()
		p.Carried = m.carried()
		p.ScrapeConfig = m.configIDs()
		p.metaSeq, p.pushes = m.Seq, m.Features&featureMetaPush != 0
		p.deltas = m.Features&featureWeightDeltas != 0
		p.Capabilities = m.Caps
	}
	return p
}

// conflicts hears from memberlist when a peer claims a name that another
// live node already has: two nodes with one --cluster.node-name would share
// one place on the ring, and memberlist keeps only the first.
type conflicts Node

func (c *conflicts) NotifyConflict(existing, other *memberlist.Node) {
	n := (*Node)(c)
	n.metrics.receivedEvents.WithLabelValues(eventNodeConflict).Inc()
	n.noteConflict(existing, other)
	n.logger.Warn("Two nodes claim the same --cluster.node-name; the second is ignored until the first leaves",
		"name", existing.Name,
		"existing_addr", net.JoinHostPort(existing.Addr.String(), strconv.Itoa(int(existing.Port))),
		"other_addr", net.JoinHostPort(other.Addr.String(), strconv.Itoa(int(other.Port))))
}

func (n *Node) forget(mn *memberlist.Node) {
	if mn.Name == n.cfg.NodeName {
		return
	}
	n.metrics.receivedEvents.WithLabelValues("leave").Inc()
	n.mu.Lock()
	last, had := n.peers[mn.Name]
	delete(n.peers, mn.Name)
	if had {
		n.noteDepartureLocked(last, time.Now())
	}
	// Its weight set stays (Weights lists only alive members): a member
	// wrongly declared dead and refuted comes back with it, rather than
	// without weights until the next push/pull. pruneWeights forgets it.
	n.gone[mn.Name] = time.Now()
	n.mu.Unlock()
	if had {
		n.logger.Debug("peer gone", "peer", mn.Name)
	}
	n.afterChange()
}

// mergeLamport advances the clock past an observed value.
func (n *Node) mergeLamport(seen uint64) {
	for {
		cur := n.lamport.Load()
		next := max(cur, seen) + 1
		if n.lamport.CompareAndSwap(cur, next) {
			return
		}
	}
}

func (n *Node) metaLocked() []byte {
	return nodeMeta{
		State:     n.state.String(),
		HTTPAddr:  n.cfg.HTTPAddr,
		KubeNode:  n.cfg.KubeNode,
		StartTime: n.startTime.UnixMilli(),
		Lamport:   n.metaClock,
		Seq:       n.metaSeq,
		Features:  n.features(),
		Caps:      n.cfg.Capabilities,
		Carried:   carriedMeta(n.carried),
		ConfigCur: n.configIDs.Cur, ConfigPrev: n.configIDs.Prev,
		FencedSeq: n.watermarks.FencedSeq, FencedRing: n.watermarks.FencedRing,
		AckedSeq: n.watermarks.AckedSeq, FencedPlacement: n.watermarks.FencedPlacement,
		LostSeq: n.watermarks.LostSeq,
	}.marshal()
}

// delegate gives memberlist this node's metadata.
type delegate Node

func (d *delegate) NodeMeta(limit int) []byte {
	n := (*Node)(d)
	n.mu.Lock()
	b := n.metaLocked()
	n.mu.Unlock()
	if len(b) > limit {
		// Cannot happen with the length checks in New; never hand memberlist
		// more than it allows (it panics).
		n.logger.Error("node metadata too large; gossiping none", "size", len(b), "limit", limit)
		return nil
	}
	return b
}

// NotifyMsg receives a peer's metadata push, weight set, weight delta or
// request for weight sets.
func (d *delegate) NotifyMsg(b []byte) {
	n := (*Node)(d)
	switch {
	case len(b) > 0 && b[0] == msgMeta:
		n.receiveMetaPush(b)
	case n.cfg.noWeightDeltas:
		n.receiveWeights(b) // as a node of an older version: deltas are garbage
	case len(b) > 0 && b[0] == msgWeightsDelta:
		n.receiveWeightsDelta(b)
	case len(b) > 0 && b[0] == msgWeightsWant:
		n.receiveWeightsWant(b)
	default:
		n.receiveWeights(b)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState and MergeRemoteState exchange the per-target weights of every
// alive member in the periodic push/pull: whole on a join, otherwise only
// their versions once every member reads deltas (weightsdelta.go).
func (d *delegate) LocalState(join bool) []byte { return (*Node)(d).localWeightsState(join) }

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	n := (*Node)(d)
	switch {
	case len(buf) == 0:
	case buf[0] == msgWeightsSummary && !n.cfg.noWeightDeltas:
		n.receiveWeightsSummary(buf)
	default:
		n.receiveWeights(buf)
	}
}

// events receives memberlist's membership events.
type events Node

func (e *events) NotifyJoin(mn *memberlist.Node)   { (*Node)(e).observe(mn, "join") }
func (e *events) NotifyUpdate(mn *memberlist.Node) { (*Node)(e).observe(mn, "update") }
func (e *events) NotifyLeave(mn *memberlist.Node)  { (*Node)(e).forget(mn) }

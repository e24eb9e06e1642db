package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"k8s.io/client-go/kubernetes"
)

// Defaults applied by DefaultConfig and, for zero-valued fields, by New.
const (
	DefaultListenAddr     = "0.0.0.0:7946"
	DefaultRejoinInterval = 60 * time.Second
	DefaultWaitTimeout    = 5 * time.Minute

	// maxHTTPAddrLen keeps the node metadata well below memberlist's
	// 512-byte limit (memberlist.MetaMaxSize).
	maxHTTPAddrLen = 256
	// maxKubeNodeLen is a Kubernetes node name's limit (a DNS subdomain);
	// with the HTTP address it must stay within maxMetaStrings, which
	// leaves room for the watermarks, the scrape configuration ids, the
	// sequence number, the features and the capabilities.
	maxKubeNodeLen = 253
	maxMetaStrings = 198
	// maxLabelLen is memberlist's limit on the cluster label.
	maxLabelLen = 255
)

// Config configures a Node. Start from DefaultConfig; New fills zero-valued
// fields with the defaults documented below, except RejoinInterval, whose
// zero value means "disabled".
type Config struct {
	// NodeName is this node's unique name in the cluster and on the ring.
	// Default: the hostname.
	NodeName string

	// ListenAddr is the gossip bind address, "ip:port" (TCP and UDP). Port 0
	// picks a free port. Default: "0.0.0.0:7946".
	ListenAddr string

	// AdvertiseAddr is the address peers use to reach this node: "host" or
	// "host:port"; the port defaults to the listen port and a host name is
	// resolved once at Start. Default: the listen IP if it is a specific
	// address, else the first private IPv4 address of the host, else the first
	// other non-loopback IPv4 address, else 127.0.0.1 (a loopback-only host
	// can only form a cluster with itself anyway).
	AdvertiseAddr string

	// Join lists peers to join at Start and again every RejoinInterval:
	//   host:port                  every A/AAAA record of host
	//   dns+host:port              the same
	//   dnssrv+_name._proto.host   every SRV record (target:port)
	// A missing port means the listen port. Default: none.
	Join []string

	// KubernetesLabelSelector, when set, also finds peers through the
	// Kubernetes API: pods in KubernetesNamespace that match the selector, are
	// Running and have a pod IP, joined at the listen port.
	KubernetesLabelSelector string
	// KubernetesNamespace defaults to the pod's own namespace (from the
	// service account) or "default".
	KubernetesNamespace string

	// RejoinInterval re-resolves Join and the Kubernetes pods and joins any
	// peer not yet a member, which heals a split brain. While the node is
	// alone it retries sooner (1s, doubling up to RejoinInterval).
	// Default (DefaultConfig): 60s; 0 disables re-joining after Start.
	RejoinInterval time.Duration

	// ClusterName is the memberlist label: nodes with different names refuse
	// each other's packets and never merge. Default: none.
	ClusterName string

	// SecretKey enables gossip encryption (AES-GCM). It must be 16, 24 or 32
	// bytes long. Nodes with different keys never merge. Default: none.
	SecretKey []byte

	// TLS, when its CertFile is set, carries all gossip over mutual TLS
	// (see TLSConfig); it can be combined with SecretKey. Default: off.
	TLS TLSConfig

	// WaitForSize makes Ready false until this many non-terminating members (this node
	// included) are seen, or until WaitTimeout has passed since Start.
	// Default: 0 (ready at once).
	WaitForSize int
	// WaitTimeout bounds WaitForSize. Default: 5m; it is never infinite.
	WaitTimeout time.Duration

	// SnapshotPath is the file where the node records the cluster's members
	// (names, gossip addresses, which were participants) while it runs and
	// at shutdown. On start it joins them besides Join and, when WaitForSize
	// is 0, waits for the participants it remembers (startupwait.go),
	// bounded by WaitTimeout. Default: none (nothing is remembered).
	SnapshotPath string

	// HTTPAddr is the HTTP address of this node ("host:port") that peers
	// show on their status pages and call for cluster APIs. It is gossiped
	// in the node metadata. Default: none.
	HTTPAddr string

	// KubeNode is the name of the Kubernetes node this replica runs on
	// (from the downward API), gossiped in the node metadata so that every
	// node knows who scrapes node-local targets. Default: none.
	KubeNode string

	// Capabilities are bits a higher layer sets to tell its peers what its
	// version can do (placement.Capabilities); they travel in the node
	// metadata as they are and come back in Peer.Capabilities. The cluster
	// does not read them. Default: none.
	Capabilities uint64

	// Resolver resolves Join host names and a host-name AdvertiseAddr.
	// Default: net.DefaultResolver. See ResolverFor.
	Resolver *net.Resolver

	// KubeClient lists pods for KubernetesLabelSelector. Default: a client
	// built from the in-cluster configuration, created only when the label
	// selector is set.
	KubeClient kubernetes.Interface

	// Memberlist, if set, tunes the memberlist configuration. It receives
	// memberlist.DefaultLANConfig() with RetransmitMult raised to 6 and
	// PushPullInterval lowered to 10s, so that a state change reaches every
	// peer (see memberlistConfig), and runs before Start sets the
	// node name, addresses, label, key, delegates and logger, which it cannot
	// change. Tests use it for fast timings.
	Memberlist func(*memberlist.Config)

	// noWeightDeltas makes the node speak weights as versions before
	// deltas did: whole sets only. Tests of mixed-version clusters set it.
	noWeightDeltas bool
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	hostname, _ := os.Hostname()
	return Config{
		NodeName:       hostname,
		ListenAddr:     DefaultListenAddr,
		RejoinInterval: DefaultRejoinInterval,
		WaitTimeout:    DefaultWaitTimeout,
	}
}

// ResolverFor returns a pure-Go resolver that sends every query to the DNS
// server at addr ("host:port"), over UDP or TCP as the resolver asks.
func ResolverFor(addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}

// joinKind says how a Join entry is resolved.
type joinKind int

const (
	joinHost joinKind = iota // A/AAAA records of host, at port
	joinSRV                  // SRV records of name
)

type joinSpec struct {
	raw  string
	kind joinKind
	host string // host name or IP literal; the SRV name for joinSRV
	port int    // unused for joinSRV
}

// normalize validates cfg, fills defaults and parses the address fields.
func (cfg *Config) normalize() (listenIP net.IP, listenPort int, specs []joinSpec, err error) {
	if cfg.NodeName == "" {
		cfg.NodeName, _ = os.Hostname()
		if cfg.NodeName == "" {
			return nil, 0, nil, errors.New("cluster: node name is empty and the hostname is unknown")
		}
	}
	if cfg.ListenAddr == "" {
		cfg.ListenAddr = DefaultListenAddr
	}
	host, portStr, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("cluster: listen address %q: want ip:port: %w", cfg.ListenAddr, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	listenIP = net.ParseIP(host)
	if listenIP == nil {
		return nil, 0, nil, fmt.Errorf("cluster: listen address %q: host must be an IP address", cfg.ListenAddr)
	}
	listenPort, err = parsePort(portStr)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("cluster: listen address %q: %w", cfg.ListenAddr, err)
	}
	if cfg.AdvertiseAddr != "" {
		if _, _, err := splitAdvertise(cfg.AdvertiseAddr, listenPort); err != nil {
			return nil, 0, nil, err
		}
	}
	for _, j := range cfg.Join {
		s, err := parseJoin(j, listenPort)
		if err != nil {
			return nil, 0, nil, err
		}
		specs = append(specs, s)
	}
	if cfg.RejoinInterval < 0 {
		return nil, 0, nil, fmt.Errorf("cluster: rejoin interval %s is negative", cfg.RejoinInterval)
	}
	if cfg.WaitForSize < 0 {
		return nil, 0, nil, fmt.Errorf("cluster: wait-for-size %d is negative", cfg.WaitForSize)
	}
	if cfg.WaitTimeout < 0 {
		return nil, 0, nil, fmt.Errorf("cluster: wait timeout %s is negative", cfg.WaitTimeout)
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = DefaultWaitTimeout
	}
	switch len(cfg.SecretKey) {
	case 0, 16, 24, 32:
	default:
		return nil, 0, nil, fmt.Errorf("cluster: secret key is %d bytes long; it must be 16, 24 or 32 bytes (AES-128, AES-192 or AES-256)", len(cfg.SecretKey))
	}
	if err := cfg.TLS.normalize(); err != nil {
		return nil, 0, nil, err
	}
	if len(cfg.ClusterName) > maxLabelLen {
		return nil, 0, nil, fmt.Errorf("cluster: cluster name is %d bytes long; at most %d are allowed", len(cfg.ClusterName), maxLabelLen)
	}
	if len(cfg.HTTPAddr) > maxHTTPAddrLen {
		return nil, 0, nil, fmt.Errorf("cluster: HTTP address is %d bytes long; at most %d are allowed", len(cfg.HTTPAddr), maxHTTPAddrLen)
	}
	if err := checkKubeNode(cfg.KubeNode, len(cfg.HTTPAddr)); err != nil {
		return nil, 0, nil, err
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	return listenIP, listenPort, specs, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return p, nil
}

// splitAdvertise splits "host" or "host:port" (IPv6 literals with or without
// brackets) and defaults the port.
func splitAdvertise(addr string, defaultPort int) (string, int, error) {
	if ip := net.ParseIP(strings.Trim(addr, "[]")); ip != nil {
		return ip.String(), defaultPort, nil
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		if strings.Contains(addr, ":") {
			return "", 0, fmt.Errorf("cluster: advertise address %q: want host or host:port: %w", addr, err)
		}
		return addr, defaultPort, nil
	}
	if host == "" {
		return "", 0, fmt.Errorf("cluster: advertise address %q has no host", addr)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return "", 0, fmt.Errorf("cluster: advertise address %q: %w", addr, err)
	}
	if port == 0 {
		port = defaultPort
	}
	return host, port, nil
}

// parseJoin parses one Join entry.
func parseJoin(raw string, defaultPort int) (joinSpec, error) {
	s := strings.TrimSpace(raw)
	switch {
	case strings.HasPrefix(s, "dnssrv+"):
		name := strings.TrimPrefix(s, "dnssrv+")
		if name == "" || strings.ContainsAny(name, ":/ ") {
			return joinSpec{}, fmt.Errorf("cluster: join %q: want dnssrv+_name._proto.host", raw)
		}
		return joinSpec{raw: raw, kind: joinSRV, host: name}, nil
	case strings.HasPrefix(s, "dns+"):
		s = strings.TrimPrefix(s, "dns+")
	}
	if s == "" {
		return joinSpec{}, fmt.Errorf("cluster: join %q: empty address", raw)
	}
	host, port := s, defaultPort
	if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
		host = ip.String()
	} else if strings.Contains(s, ":") {
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return joinSpec{}, fmt.Errorf("cluster: join %q: want host:port: %w", raw, err)
		}
		if h == "" {
			return joinSpec{}, fmt.Errorf("cluster: join %q: no host", raw)
		}
		pp, err := parsePort(p)
		if err != nil || pp == 0 {
			return joinSpec{}, fmt.Errorf("cluster: join %q: bad port %q", raw, p)
		}
		host, port = h, pp
	}
	if strings.ContainsAny(host, "/ ") {
		return joinSpec{}, fmt.Errorf("cluster: join %q: bad host %q", raw, host)
	}
	if port == 0 {
		return joinSpec{}, fmt.Errorf("cluster: join %q has no port and the listen port is 0", raw)
	}
	return joinSpec{raw: raw, kind: joinHost, host: host, port: port}, nil
}

// defaultAdvertiseIP picks the address peers should use when none is
// configured: the listen IP if specific, else the first private IPv4, else the
// first other non-loopback IPv4, else 127.0.0.1.
func defaultAdvertiseIP(listenIP net.IP) net.IP {
	if listenIP != nil && !listenIP.IsUnspecified() {
		return listenIP
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return net.IPv4(127, 0, 0, 1)
	}
	var public net.IP
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip := ipn.IP.To4()
			if ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
				continue
			}
			if ip.IsPrivate() {
				return ip
			}
			if public == nil && ip.IsGlobalUnicast() {
				public = ip
			}
		}
	}
	if public != nil {
		return public
	}
	return net.IPv4(127, 0, 0, 1)
}

// checkKubeNode validates a Kubernetes node name for the node metadata: a
// DNS subdomain (lower-case letters, digits, '-' and '.'; nothing JSON
// escapes), short enough with the HTTP address to fit in 512 bytes.
func checkKubeNode(name string, httpAddrLen int) error {
	if len(name) > maxKubeNodeLen {
		return fmt.Errorf("cluster: Kubernetes node name is %d bytes long; at most %d are allowed", len(name), maxKubeNodeLen)
	}
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return fmt.Errorf("cluster: Kubernetes node name %q: only lower-case letters, digits, '-' and '.' are allowed", name)
		}
	}
	if len(name)+httpAddrLen > maxMetaStrings {
		return fmt.Errorf("cluster: Kubernetes node name and HTTP address are %d bytes long together; at most %d are allowed in the node metadata", len(name)+httpAddrLen, maxMetaStrings)
	}
	return nil
}

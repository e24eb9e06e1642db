// Command shoal is a gossip-clustered Prometheus scrape agent: every replica
// discovers the same targets, scrapes the ones it owns on a consistent-hash
// ring, buffers samples in a write-ahead log and remote-writes them.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/alecthomas/units"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"

	"github.com/shoal-dev/shoal/placement"
)

// flags holds the command line; names and defaults are part of SPEC.
// labelNameRE matches a classic Prometheus label name.
var labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

type flags struct {
	configFile    string
	listenAddress string
	webConfigFile string
	// webClientConfigFile: credentials for asking peers (status page fan-out).
	webClientConfigFile string

	storagePath        string
	walMaxAge          time.Duration
	walMaxSize         units.Base2Bytes
	walSegmentSize     units.Base2Bytes
	walTruncateEvery   time.Duration
	remoteFlushTimeout time.Duration

	clusterEnabled         bool
	nodeName               string
	clusterListen          string
	clusterAdvertise       string
	clusterJoin            []string
	kubeLabelSelector      string
	kubeNamespace          string
	kubeNodeName           string
	kubeconfig             string
	monitors               monitorFlags
	rejoinInterval         time.Duration
	clusterName            string
	secretKeyFile          string
	clusterTLS             clusterTLSFlags
	waitForSize            int
	waitTimeout            time.Duration
	replicationFactor      int
	tokens                 int
	handoffDelay           time.Duration
	handoffTimeout         time.Duration
	replicaLabel           string
	placement              string
	terminateGraceDeadline time.Duration
	handoverTimeout        time.Duration
	handoverMaxBytes       units.Base2Bytes
	capacitySamples        float64

	autoMemLimit      bool
	autoMemLimitRatio float64

	log promslog.Config
}

// maxTokens bounds --cluster.tokens: the ring holds tokens × nodes entries.
const maxTokens = 8192

func parseFlags(args []string) (*flags, error) {
	f := &flags{log: promslog.Config{}}
	hostname, _ := os.Hostname()
	return parseApp(newApp(f, hostname), f, args)
}

// newApp defines the command line, binding every flag to f; hostname is
// --cluster.node-name's default. docs/reference/flags.md is generated from
// it (TestFlagsReferenceIsCurrent).
func newApp(f *flags, hostname string) *kingpin.Application {

	app := kingpin.New("shoal", "A gossip-clustered, peer-to-peer Prometheus scrape agent.")
	app.Version(version.Print("shoal"))
	app.HelpFlag.Short('h')

	app.Flag("config.file", "Prometheus configuration file (global, scrape_configs, scrape_config_files, remote_write). Unknown fields are an error.").
		Default("shoal.yml").StringVar(&f.configFile)
	app.Flag("web.listen-address", "Address for the HTTP server: status page, APIs and /metrics.").
		Default(":9940").StringVar(&f.listenAddress)
	app.Flag("web.config.file", "Path to an exporter-toolkit web configuration file enabling TLS or basic auth.").
		Default("").StringVar(&f.webConfigFile)
	app.Flag("web.client-config.file", "Prometheus HTTP client configuration (tls_config, basic_auth with password_file, authorization) used to ask peers for the cluster views when --web.config.file enables TLS or basic auth.").
		Default("").StringVar(&f.webClientConfigFile)

	app.Flag("storage.path", "Directory for the write-ahead log and remote-write progress.").
		Default("data/").StringVar(&f.storagePath)
	app.Flag("storage.wal.max-age", "WAL segments older than this are deleted even if a remote end has not received them (the data is counted as lost in shoal_wal_segments_dropped_unsent_total). This is the retention that bounds a remote-write outage.").
		Default("24h").DurationVar(&f.walMaxAge)
	app.Flag("storage.wal.max-size", "When the WAL (segments and checkpoint) grows past this while a remote end is behind, its oldest segments are deleted even if unsent (counted in shoal_wal_segments_dropped_unsent_total). Checked every minute; at least two segments. Default: no size limit.").
		BytesVar(&f.walMaxSize)
	app.Flag("storage.wal.segment-size", "Size of a WAL segment; segments are the unit of truncation.").
		Default("128MB").BytesVar(&f.walSegmentSize)
	// Hidden: tests shorten it so that checkpoints and truncations happen often.
	app.Flag("storage.wal.truncate-interval", "How often the WAL is checkpointed and truncated.").
		Hidden().Default("1m").DurationVar(&f.walTruncateEvery)
	app.Flag("storage.remote.flush-deadline", "How long to keep sending buffered samples on shutdown.").
		Default("1m").DurationVar(&f.remoteFlushTimeout)

	app.Flag("cluster.enabled", "Join a cluster and scrape only the targets this node owns. Off: a single agent that scrapes everything.").
		Default("false").BoolVar(&f.clusterEnabled)
	app.Flag("cluster.node-name", "Unique name of this node on the ring.").
		Default(hostname).StringVar(&f.nodeName)
	app.Flag("cluster.listen-address", "Gossip bind address.").
		Default("0.0.0.0:7946").StringVar(&f.clusterListen)
	app.Flag("cluster.advertise-address", "host or host:port that peers use to reach this node; the port defaults to the listen port. Default: the first private IPv4 address.").
		Default("").StringVar(&f.clusterAdvertise)
	app.Flag("cluster.join", "Peers to join, repeatable: host:port (every A/AAAA record is tried), dns+host:port, or dnssrv+_name._proto.host.").
		StringsVar(&f.clusterJoin)
	app.Flag("cluster.kubernetes.label-selector", "Find peers through the Kubernetes API: pods matching this label selector.").
		Default("").StringVar(&f.kubeLabelSelector)
	app.Flag("cluster.kubernetes.namespace", "Namespace of the peer pods for --cluster.kubernetes.label-selector (default: this pod's namespace).").
		Default("").StringVar(&f.kubeNamespace)
	app.Flag("cluster.kubernetes.node-name", "Name of the Kubernetes node this replica runs on (the downward API's spec.nodeName), gossiped to peers: targets whose __shoal_sharding__ label is node-local are scraped by the replica on their __meta_kubernetes_pod_node_name.").
		Envar("NODE_NAME").Default("").StringVar(&f.kubeNodeName)
	app.Flag("cluster.kubernetes.kubeconfig", "Kubeconfig file for --cluster.kubernetes.label-selector, for a shoal outside the cluster (default: the in-cluster service account). Its context's namespace is the default of --cluster.kubernetes.namespace.").
		Default("").StringVar(&f.kubeconfig)
	addMonitorFlags(app, &f.monitors)
	app.Flag("cluster.rejoin-interval", "Re-resolve peers and rejoin this often, healing a split brain; 0 disables.").
		Default("60s").DurationVar(&f.rejoinInterval)
	app.Flag("cluster.name", "Cluster name, gossiped as the memberlist label: clusters with different names never merge.").
		Default("").StringVar(&f.clusterName)
	app.Flag("cluster.secret-key-file", "File holding the gossip encryption key (16, 24 or 32 bytes).").
		Default("").StringVar(&f.secretKeyFile)
	app.Flag("cluster.tls-cert-file", "Gossip over mutual TLS: this node's PEM certificate, presented to every peer. Every peer must present one signed by --cluster.tls-ca-file. The files are read again when they change: no restart on rotation. Combines with --cluster.secret-key-file.").
		Default("").StringVar(&f.clusterTLS.certFile)
	app.Flag("cluster.tls-key-file", "Private key of --cluster.tls-cert-file (PEM).").
		Default("").StringVar(&f.clusterTLS.keyFile)
	app.Flag("cluster.tls-ca-file", "PEM certificates of the CAs that sign peers' gossip certificates.").
		Default("").StringVar(&f.clusterTLS.caFile)
	app.Flag("cluster.tls-server-name", "DNS name every peer's gossip certificate must carry; empty checks only the CA signature (peers are dialled by IP address).").
		Default("").StringVar(&f.clusterTLS.serverName)
	app.Flag("cluster.tls-min-version", "Lowest TLS version for gossip: TLS13 or TLS12.").
		Default("TLS13").EnumVar(&f.clusterTLS.minVersion, "TLS13", "TLS12")
	app.Flag("cluster.wait-for-size", "Take no targets until this many participants are seen ...").
		Default("0").IntVar(&f.waitForSize)
	app.Flag("cluster.wait-timeout", "... or until this much time has passed since start.").
		Default("5m").DurationVar(&f.waitTimeout)
	app.Flag("cluster.replication-factor", "Each target is scraped by this many distinct owners.").
		Default("1").IntVar(&f.replicationFactor)
	app.Flag("cluster.tokens", "Tokens per node on the consistent-hash ring.").
		Default("512").IntVar(&f.tokens)
	app.Flag("cluster.handoff-delay", "Upper bound of how long a node that gains a target waits for every peer to announce that it stopped appending it (normally milliseconds; longer while a peer follows another placement under which it may own the target, up to --cluster.handoff-timeout); 0 means the default.").
		Default(placement.DefaultHandoffDelay.String()).DurationVar(&f.handoffDelay)
	app.Flag("cluster.handoff-timeout", "Upper bound of how long remote write holds back a gained target's samples until the previous owners' last samples are acknowledged (they are held while the remote end is down).").
		Default("5m").DurationVar(&f.handoffTimeout)
	app.Flag("cluster.terminate-grace", "On shutdown, how long to wait for this node's last samples of handed-off targets to be acknowledged after it turned terminating.").
		Default("5s").DurationVar(&f.terminateGraceDeadline)
	app.Flag("cluster.handover.timeout", "On shutdown, how long a replica whose remote-write queues still hold unacknowledged samples (after --cluster.terminate-grace and the flush) may spend handing that backlog to a live peer, which stores it and sends it; 0 disables the hand-over. What cannot be handed over in time stays on this replica's storage.").
		Default("60s").DurationVar(&f.handoverTimeout)
	app.Flag("cluster.handover.max-bytes", "Largest backlog (WAL and progress files) a replica hands over, and most a replica keeps of backlogs taken over and not yet delivered.").
		Default("2GB").BytesVar(&f.handoverMaxBytes)
	app.Flag("cluster.capacity.samples-per-second", "Samples per second one replica is sized for: shoal_replica_utilization_ratio is the samples appended per second over this, the signal an autoscaler scales the replicas on. 0: no such gauge.").
		Default("0").FloatVar(&f.capacitySamples)
	app.Flag("cluster.replica-label", "With --cluster.replication-factor above 1, the target label that carries each owner's rank for the target (0 for the primary); on targets whose __shoal_sharding__ label is all, each node's name. Must not start with \"__\".").
		Default("replica").StringVar(&f.replicaLabel)
	app.Flag("cluster.placement", "How targets are placed on the participants: ring (consistent hashing, equal shares of the key space, nothing gossiped per target) or bounded (bounded-load consistent hashing over the samples/s each owner measures and gossips: no node above 1.10 × the mean, targets kept where they are while that holds). The cluster places with bounded loads only while every participant runs bounded; otherwise every node places on the ring.").
		Default(placement.DefaultMode).EnumVar(&f.placement, placement.Modes...)

	app.Flag("auto-gomemlimit", "Set the Go runtime's soft memory limit (GOMEMLIMIT) from the container's memory limit (cgroup), or the machine's memory where there is none. A GOMEMLIMIT environment variable wins.").
		Default("true").BoolVar(&f.autoMemLimit)
	app.Flag("auto-gomemlimit.ratio", "Share of the detected memory limit given to GOMEMLIMIT; the rest is headroom for what the Go runtime does not count (binary pages, fragmentation). Greater than 0, at most 1.").
		Default("0.9").FloatVar(&f.autoMemLimitRatio)

	promslogflag.AddFlags(app, &f.log)
	return app
}

// parseApp parses args with app (from newApp(f)) and checks what kingpin cannot.
func parseApp(app *kingpin.Application, f *flags, args []string) (*flags, error) {
	if _, err := app.Parse(args); err != nil {
		return nil, nameFlag(app, args, err)
	}
	if strings.HasPrefix(f.replicaLabel, "__") || (f.replicaLabel != "" && !labelNameRE.MatchString(f.replicaLabel)) {
		return nil, fmt.Errorf("--cluster.replica-label=%q is not a valid target label name (it must not start with \"__\", which Prometheus strips from target labels)", f.replicaLabel)
	}
	if f.autoMemLimitRatio <= 0 || f.autoMemLimitRatio > 1 {
		return nil, fmt.Errorf("--auto-gomemlimit.ratio must be greater than 0 and at most 1, got %g", f.autoMemLimitRatio)
	}
	if f.handoffTimeout <= 0 {
		return nil, fmt.Errorf("--cluster.handoff-timeout must be positive, got %s", f.handoffTimeout)
	}
	if f.handoverTimeout < 0 || f.capacitySamples < 0 {
		return nil, fmt.Errorf("--cluster.handover.timeout and --cluster.capacity.samples-per-second must not be negative")
	}
	if f.replicationFactor < 1 {
		return nil, fmt.Errorf("--cluster.replication-factor must be at least 1, got %d", f.replicationFactor)
	}
	if f.tokens < 1 || f.tokens > maxTokens {
		return nil, fmt.Errorf("--cluster.tokens must be between 1 and %d, got %d", maxTokens, f.tokens)
	}
	if f.waitForSize < 0 {
		return nil, fmt.Errorf("--cluster.wait-for-size must not be negative, got %d", f.waitForSize)
	}
	if f.walSegmentSize < 64*units.KiB {
		return nil, fmt.Errorf("--storage.wal.segment-size must be at least 64KiB, got %s", f.walSegmentSize)
	}
	if f.nodeName == "" {
		return nil, fmt.Errorf("--cluster.node-name is empty and the hostname is unknown")
	}
	if !f.clusterEnabled {
		// Cluster settings without a cluster would be silently ignored: a
		// single agent that scrapes everything where a shard was meant.
		for _, c := range []struct {
			set  bool
			flag string
		}{
			{f.waitForSize > 0, "--cluster.wait-for-size"},
			{f.replicationFactor > 1, "--cluster.replication-factor"},
			{len(f.clusterJoin) > 0, "--cluster.join"},
			{f.secretKeyFile != "", "--cluster.secret-key-file"},
			{f.clusterTLS.certFile != "", "--cluster.tls-cert-file"},
			{f.kubeLabelSelector != "", "--cluster.kubernetes.label-selector"},
		} {
			if c.set {
				return nil, fmt.Errorf("%s is set but --cluster.enabled is not: add --cluster.enabled or drop %s", c.flag, c.flag)
			}
		}
	}
	return f, nil
}

func main() {
	// `shoal cluster ...` queries a running agent (cli.go).
	if len(os.Args) > 1 && os.Args[1] == "cluster" {
		os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr))
	}
	f, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "shoal:", err)
		os.Exit(2)
	}
	// SIGTERM and Ctrl-C start the graceful shutdown; a second one kills at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal terminates immediately
	}()
	if err := run(ctx, f); err != nil {
		fmt.Fprintln(os.Stderr, "shoal:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for input the user must fix (a file or flag, as for a bad
// command line), 1 for anything else.
func exitCode(err error) int {
	var ce *configError
	if errors.As(err, &ce) {
		return 2
	}
	return 1
}

// configError marks a start-up failure caused by a configuration file or a
// flag's value rather than by the environment: main exits with code 2.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// badConfig wraps err as a configError (nil stays nil).
func badConfig(err error) error {
	if err == nil {
		return nil
	}
	return &configError{err}
}

// nameFlag adds the flag's name to a value error, which kingpin reports
// without it (`time: invalid duration "soon"`).
func nameFlag(app *kingpin.Application, args []string, err error) error {
	pc, perr := app.ParseContext(args)
	if perr != nil {
		return err
	}
	for _, el := range pc.Elements {
		fc, ok := el.Clause.(*kingpin.FlagClause)
		if !ok || el.Value == nil {
			continue
		}
		// kingpin quotes the bad value in its error; an empty value matches anything.
		if *el.Value != "" && strings.Contains(err.Error(), strconv.Quote(*el.Value)) {
			return fmt.Errorf("--%s=%s: %w", fc.Model().Name, *el.Value, err)
		}
	}
	return err
}

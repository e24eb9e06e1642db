// Package cluster is shoal's membership layer: a hashicorp/memberlist
// cluster with peer discovery, node states, a lamport clock, wait-for-size
// and cluster metrics. It knows nothing about targets; the ring and the
// scrape filter observe it through Peers and Subscribe.
//
// # Lifecycle
//
//	n, err := cluster.New(cfg, logger, reg) // validates; binds nothing
//	err = n.Start(ctx)                      // bind, join or bootstrap, rejoin loop
//	...                                     // load config, replay WAL
//	n.SetState(cluster.Participant)
//	...
//	n.SetState(cluster.Terminating)         // peers drop it from the ring
//	n.Leave(5 * time.Second)
//	n.Shutdown()
//
// # States
//
// A node is a Viewer from New until the caller calls SetState(Participant)
// (once its configuration is loaded and its WAL replayed), and Terminating
// from the start of its shutdown. Only participants own targets. A node
// cannot leave Terminating.
//
// # Metadata
//
// Each node gossips small JSON metadata through memberlist's Delegate.NodeMeta
// and re-broadcasts it with UpdateNode on every state change: its state, its
// HTTP address (Config.HTTPAddr, for the status page and cluster APIs), its
// start time and the lamport clock value of its last state change. The
// lamport clock advances on every local state change and, on observing a
// peer's metadata, to max(local, peer)+1 (metric cluster_node_lamport_time).
// Metadata that cannot be decoded marks the peer a viewer and is counted in
// shoal_cluster_bad_peer_metadata_total.
//
// A node restarted under the same name must not be seen in its previous
// life's state (say, terminating). memberlist guarantees this: when the new
// node hears older news about itself it refutes it with a higher
// incarnation carrying its current metadata, and peers keep the highest
// incarnation. Peers lists alive (and suspect) members only; dead and left
// ones are removed at once.
//
// # Discovery
//
// Config.Join accepts
//
//	host:port                  join every A/AAAA record of host (a Kubernetes
//	                           headless Service returns every pod this way)
//	dns+host:port              the same
//	dnssrv+_name._proto.host   join target:port of every SRV record
//
// and Config.KubernetesLabelSelector lists pods through the Kubernetes API
// (client-go): pods of KubernetesNamespace matching the selector, in phase
// Running, with a pod IP, joined at the listen port. Discovery skips this
// node and peers that are already members. If no peer answers, the node
// bootstraps a cluster of one.
//
// # Rejoin
//
// Every RejoinInterval (default 60s; 0 disables) discovery runs again and the
// node joins any discovered address that is not a member yet. This heals a
// split brain: two halves that formed apart merge once discovery lists
// both. A node that is alone retries sooner (1s, doubling up to the interval).
//
// # Timings
//
// memberlist.DefaultLANConfig, with two changes that make a state change
// reach every peer: RetransmitMult 6 instead of 4 (with 4, a rollout of 50
// nodes leaves some peer with a stale state about half the time) and a full
// state exchange every 10s instead of 30s (memberlist doubles it above 32
// nodes), which repairs the rare peer gossip still missed. Config.Memberlist
// tunes anything else. SetState queues the change for gossip and returns;
// in-process, 50 nodes converge in about 3s and 5 in well under a second.
//
// # Wait for size
//
// Ready is false until WaitForSize members that are not terminating (this
// node included, viewers too: a node stays a viewer until it is ready) are
// seen, or until WaitTimeout (default 5m, never infinite) has passed since
// Start; with WaitForSize 0 it is true at once. Once true it stays true.
//
// # Restarts
//
// With Config.SnapshotPath the node records the other members (names,
// addresses, which were participants) while it runs and at shutdown
// (snapshot.go), joins them again on start besides Join, and, without
// WaitForSize, waits for that cluster before it is ready; a node that
// remembers nothing and whose join addresses other than its own did not
// answer waits for them too. The wait ends when a participant answers,
// when every remembered participant is back (on a cold start: any peer),
// after 10s in which nothing answered, or at WaitTimeout
// (startupwait.go; docs/membership.md).
//
// # Security
//
// ClusterName becomes memberlist's label: packets and streams of another
// cluster are refused, so clusters with different names never merge even
// when discovery points them at each other. SecretKey (16, 24 or 32 bytes)
// turns on memberlist's AES-GCM encryption; a node with another key, or none,
// is refused. Refusals are counted in
// shoal_cluster_refused_messages_total{reason="label"|"encryption"}, read
// from memberlist's log, which is routed into the node's slog logger.
//
// # Metrics
//
//	cluster_node_info{state}                      1 for the current state
//	cluster_node_peers{state}                     alive members by state
//	cluster_node_lamport_time                     lamport clock
//	cluster_node_gossip_health_score              memberlist health (0 = healthy)
//	cluster_node_gossip_alive_peers               members memberlist counts alive
//	cluster_node_gossip_received_events_total{event}    join, leave, update
//	cluster_node_gossip_broadcasts_total{event}   join, leave, update
//	cluster_ready_for_traffic                     1 once Ready
//	cluster_minimum_size                          WaitForSize
//	shoal_cluster_refused_messages_total{reason}  label, encryption
//	shoal_cluster_bad_peer_metadata_total
//	shoal_cluster_discovery_errors_total{method}  dns, dnssrv, kubernetes
//	shoal_cluster_join_attempts_total{result}     success, failure
//	shoal_cluster_remembered_participants         participants remembered at start
//	shoal_cluster_snapshot_errors_total{op}       read, write
package cluster

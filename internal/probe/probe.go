package probe

import (
	_ "github.com/alecthomas/kingpin/v2"
	_ "github.com/cespare/xxhash/v2"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/miekg/dns"
	_ "github.com/oklog/run"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/common/promslog"
	_ "github.com/prometheus/exporter-toolkit/web"
	_ "github.com/prometheus/prometheus/config"
	_ "github.com/prometheus/prometheus/discovery"
	_ "github.com/prometheus/prometheus/discovery/install"
	_ "github.com/prometheus/prometheus/scrape"
	_ "github.com/prometheus/prometheus/storage/remote"
	_ "github.com/prometheus/prometheus/tsdb"
	_ "github.com/prometheus/prometheus/tsdb/wlog"
	_ "github.com/prometheus/prometheus/tsdb/record"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
)

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kingpin/v2"
	config_util "github.com/prometheus/common/config"

	"github.com/shoal-dev/shoal/web"
)

// cliOptions are the options of `shoal cluster ...`: where the agent is and
// how to reach it through the TLS and basic auth its --web.config.file asks for.
type cliOptions struct {
	url            string
	httpConfigFile string
	caFile         string
	certFile       string
	keyFile        string
	serverName     string
	insecure       bool
	username       string
	passwordFile   string
	timeout        time.Duration
	output         string

	status string
	job    string
	limit  int
	target string
}

// runCLI runs `shoal cluster ...` (args start with "cluster") and returns the exit code.
func runCLI(args []string, stdout, stderr io.Writer) int {
	o := &cliOptions{}
	app := cliApp(o)
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	app.Terminate(nil)
	cmd, err := app.Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "shoal:", err)
		return 2
	}
	return o.run(cmd, stdout, stderr)
}

// cliApp defines `shoal cluster ...`, binding every flag to o.
// docs/reference/flags.md is generated from it too.
func cliApp(o *cliOptions) *kingpin.Application {
	app := kingpin.New("shoal", "Query a running shoal agent about its cluster.")
	app.HelpFlag.Short('h')
	cl := app.Command("cluster", "Ask a running agent about the cluster: peers and their load, target placement, why a target is where it is.")
	cl.Flag("url", "Base URL of any agent of the cluster (its --web.listen-address).").
		Default("http://localhost:9940").StringVar(&o.url)
	cl.Flag("http.config.file", "Prometheus HTTP client configuration file (tls_config, basic_auth, authorization), as for promtool. The flags below are added to it.").
		StringVar(&o.httpConfigFile)
	cl.Flag("tls.ca-file", "CA certificate to verify the agent's TLS certificate (its --web.config.file tls_server_config).").StringVar(&o.caFile)
	cl.Flag("tls.cert-file", "Client certificate, when the agent asks for one (client_auth_type).").StringVar(&o.certFile)
	cl.Flag("tls.key-file", "Key of the client certificate.").StringVar(&o.keyFile)
	cl.Flag("tls.server-name", "Server name to verify the agent's certificate against.").StringVar(&o.serverName)
	cl.Flag("tls.insecure-skip-verify", "Do not verify the agent's certificate.").BoolVar(&o.insecure)
	cl.Flag("basic-auth.username", "User name for the agent's basic_auth_users.").StringVar(&o.username)
	cl.Flag("basic-auth.password-file", "File holding the basic auth password (never given on the command line, so it stays out of shell history and ps).").StringVar(&o.passwordFile)
	cl.Flag("timeout", "How long to wait for the answer.").Default("30s").DurationVar(&o.timeout)
	cl.Flag("output", "Output format: table or json (the API's data, for scripts).").Short('o').Default("table").EnumVar(&o.output, "table", "json")

	cl.Command("peers", "Every peer with its state, ring share, owned targets, series and samples/s.")
	targets := cl.Command("targets", "Every discovered target with its owners and actual scrapers, problems first.")
	targets.Flag("status", "Only targets with this placement status: "+strings.Join(web.Statuses, ", ")+" or problem (any but ok).").StringVar(&o.status)
	targets.Flag("job", "Only targets of this job.").StringVar(&o.job)
	targets.Flag("limit", "List at most this many targets, problems first (the job summary still counts all); 0 lists all.").Default("0").IntVar(&o.limit)
	explain := cl.Command("explain", "Why a target is where it is: its key, the ring tokens that decide its owners, owners by rank and who scrapes it.")
	explain.Arg("target", "The target: its scrape URL, JOB/URL, or host:port.").Required().StringVar(&o.target)
	return app
}

// run executes the parsed command cmd.
func (o *cliOptions) run(cmd string, stdout, stderr io.Writer) int {
	if cmd == "" { // --help
		return 0
	}
	c, err := o.client()
	if err != nil {
		fmt.Fprintln(stderr, "shoal cluster:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	switch cmd {
	case "cluster peers":
		err = c.peers(ctx, stdout)
	case "cluster targets":
		err = c.targets(ctx, stdout)
	case "cluster explain":
		err = c.explain(ctx, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "shoal cluster:", err)
		return 1
	}
	return 0
}

// cliClient asks one agent's API.
type cliClient struct {
	o    *cliOptions
	base *url.URL
	http *http.Client
}

func (o *cliOptions) client() (*cliClient, error) {
	raw := o.url
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	base, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("--url=%s: %w", o.url, err)
	}
	cfg := config_util.DefaultHTTPClientConfig
	if o.httpConfigFile != "" {
		c, _, err := config_util.LoadHTTPConfigFile(o.httpConfigFile)
		if err != nil {
			return nil, fmt.Errorf("--http.config.file: %w", err)
		}
		cfg = *c
	}
	tc := &cfg.TLSConfig
	for _, s := range []struct {
		dst *string
		v   string
	}{{&tc.CAFile, o.caFile}, {&tc.CertFile, o.certFile}, {&tc.KeyFile, o.keyFile}, {&tc.ServerName, o.serverName}} {
		if s.v != "" {
			*s.dst = s.v
		}
	}
	if o.insecure {
		tc.InsecureSkipVerify = true
	}
	if o.username != "" || o.passwordFile != "" {
		if o.username == "" {
			return nil, errors.New("--basic-auth.password-file needs --basic-auth.username")
		}
		cfg.BasicAuth = &config_util.BasicAuth{Username: o.username, PasswordFile: o.passwordFile}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("HTTP client options: %w", err)
	}
	hc, err := config_util.NewClientFromConfig(cfg, "shoal-cli")
	if err != nil {
		return nil, fmt.Errorf("HTTP client options: %w", err)
	}
	return &cliClient{o: o, base: base, http: hc}, nil
}

// get fetches an API path and returns the raw data member of the answer.
func (c *cliClient) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	u := c.base.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u, err)
	}
	var env struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if jerr := json.Unmarshal(body, &env); jerr != nil || resp.StatusCode != http.StatusOK {
		switch {
		case env.Error != "":
			return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, env.Error)
		case resp.StatusCode == http.StatusUnauthorized:
			return nil, fmt.Errorf("GET %s: %s (give --basic-auth.username and --basic-auth.password-file)", u, resp.Status)
		case resp.StatusCode != http.StatusOK:
			return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, firstLine(body))
		}
		return nil, fmt.Errorf("GET %s: not a shoal API answer: %w", u, jerr)
	}
	if env.Status != "success" {
		return nil, fmt.Errorf("GET %s: status %q: %s", u, env.Status, env.Error)
	}
	return env.Data, nil
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// fetch gets an API path and either prints its data as JSON or decodes it into v.
func (c *cliClient) fetch(ctx context.Context, w io.Writer, path string, q url.Values, v any) (printed bool, err error) {
	data, err := c.get(ctx, path, q)
	if err != nil {
		return false, err
	}
	if c.o.output == "json" {
		var buf bytes.Buffer
		if err := json.Indent(&buf, data, "", "  "); err != nil {
			return false, err
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return true, err
	}
	return false, json.Unmarshal(data, v)
}

func (c *cliClient) peers(ctx context.Context, w io.Writer) error {
	var d web.PeersData
	if printed, err := c.fetch(ctx, w, "/api/v1/cluster/peers", nil, &d); printed || err != nil {
		return err
	}
	fmt.Fprintf(w, "Asked %s (%s). Spread max/mean across participants: series %s, samples/s %s, owned targets %s.\n\n",
		d.Self, c.base, spread(d.Spread.Series), spread(d.Spread.SamplesPerSecond), spread(d.Spread.OwnedTargets))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tGOSSIP ADDRESS\tHTTP ADDRESS\tRING SHARE\tOWNED TARGETS\tSERIES\tSAMPLES/S\tWAL\tREADY")
	for _, p := range d.Peers {
		name := p.Name
		if p.Self {
			name += " *"
		}
		load := fmt.Sprintf("%d\t%.1f\t%s\t%s", p.Series, p.SamplesPerSecond, bytesIEC(p.WALBytes), yesNo(p.Ready, p.NotReadyReason))
		if p.Error != "" {
			load = "?\t?\t?\tunreachable"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f%%\t%d\t%s\n", name, p.State, p.Address, p.HTTPAddress, p.RingShare*100, p.OwnedTargets, load)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n* the node that answered")
	return printPeerErrors(w, d.PeerErrors)
}

func (c *cliClient) targets(ctx context.Context, w io.Writer) error {
	q := url.Values{}
	if c.o.status != "" {
		q.Set("status", c.o.status)
	}
	if c.o.job != "" {
		q.Set("job", c.o.job)
	}
	if c.o.limit > 0 {
		q.Set("limit", strconv.Itoa(c.o.limit))
	}
	var d web.ClusterTargets
	if printed, err := c.fetch(ctx, w, "/api/v1/cluster/targets", q, &d); printed || err != nil {
		return err
	}
	var parts []string
	for _, s := range web.Statuses {
		if n := d.Counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	fmt.Fprintf(w, "%d targets discovered: %s.\n\n", d.Total, orNone(strings.Join(parts, ", ")))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tTARGETS\tEXACTLY BY OWNERS\tPROBLEMS")
	for _, j := range d.Jobs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", j.Job, j.Targets, j.OK, problems(j))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(d.Targets) == 0 {
		fmt.Fprintln(w, "No target matches.")
		return printPeerErrors(w, d.PeerErrors)
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tJOB\tTARGET\tOWNERS\tSCRAPED BY\tHEALTH\tLAST ERROR")
	for _, t := range d.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Status, t.Job, t.ScrapeURL, orNone(strings.Join(t.Owners, ",")),
			orNone(strings.Join(t.ScrapedBy, ",")), orNone(t.Health), t.LastError)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if d.Matched > len(d.Targets) {
		fmt.Fprintf(w, "\n%d more targets match; raise --limit or filter with --status and --job.\n", d.Matched-len(d.Targets))
	}
	return printPeerErrors(w, d.PeerErrors)
}

func (c *cliClient) explain(ctx context.Context, w io.Writer) error {
	var d web.ExplainData
	if printed, err := c.fetch(ctx, w, "/api/v1/cluster/explain", url.Values{"target": {c.o.target}}, &d); printed || err != nil {
		return err
	}
	if len(d.Targets) == 0 {
		return fmt.Errorf("no discovered target matches %q: give its scrape URL, JOB/URL or host:port (see `shoal cluster targets`)", c.o.target)
	}
	for i, ex := range d.Targets {
		if i > 0 {
			fmt.Fprintln(w)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "target\t%s/%s\n", ex.Job, ex.ScrapeURL)
		fmt.Fprintf(tw, "status\t%s\n", ex.Status)
		fmt.Fprintf(tw, "key\t%s (%.4f%% of the ring)\n", ex.Key, ex.Position*100)
		fmt.Fprintf(tw, "ring\t%d participants (%s), %d tokens each, replication factor %d\n",
			len(ex.RingNodes), strings.Join(ex.RingNodes, ", "), ex.TokensPerNode, ex.ReplicationFactor)
		var owners []string
		for _, o := range ex.Owners {
			owners = append(owners, fmt.Sprintf("%d=%s", o.Rank, o.Node))
		}
		fmt.Fprintf(tw, "owners\t%s\n", orNone(strings.Join(owners, " ")))
		fmt.Fprintf(tw, "scraped by\t%s\n", orNone(strings.Join(ex.ScrapedBy, ", ")))
		fmt.Fprintf(tw, "why\t%s\n", ex.Reason)
		if ex.Note != "" {
			fmt.Fprintf(tw, "note\t%s\n", ex.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nTokens walked clockwise from the key:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TOKEN\tPOSITION\tNODE")
		if p := ex.Previous; p != nil {
			fmt.Fprintf(tw, "  %s\t%.4f%%\t%s\tprevious token\n", p.Token, p.Position*100, p.Node)
		}
		fmt.Fprintf(tw, "  %s\t%.4f%%\t\tthe key\n", ex.Key, ex.Position*100)
		for _, t := range ex.Walk {
			what := "already an owner: skipped"
			if t.NewOwner {
				what = "owner"
			}
			fmt.Fprintf(tw, "  %s\t%.4f%%\t%s\t%s\n", t.Token, t.Position*100, t.Node, what)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(ex.Scrapes) > 0 {
			fmt.Fprintln(w, "\nScrapes:")
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  NODE\tHEALTH\tLAST SCRAPE\tDURATION\tLAST ERROR")
			for _, s := range ex.Scrapes {
				last := "never"
				if !s.LastScrape.IsZero() {
					last = s.LastScrape.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%.3fs\t%s\n", s.Node, s.Health, last, s.LastScrapeDuration, s.LastError)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	return printPeerErrors(w, d.PeerErrors)
}

func printPeerErrors(w io.Writer, errs []web.PeerError) error {
	if len(errs) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nPeers that could not be asked (their figures and scrapes are missing above):")
	for _, e := range errs {
		fmt.Fprintf(w, "  %s: %s\n", e.Name, e.Error)
	}
	return nil
}

func spread(s web.Spread) string {
	if s.Ratio() == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (max %s)", s.Ratio(), s.MaxNode)
}

func problems(j web.JobSummary) string {
	if j.Problems == 0 {
		return "0"
	}
	var parts []string
	for _, s := range web.Statuses {
		if n := j.ByStatus[s]; n > 0 && s != web.StatusOK {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	return fmt.Sprintf("%d (%s)", j.Problems, strings.Join(parts, ", "))
}

func yesNo(ready bool, why string) string {
	if ready {
		return "yes"
	}
	return "no: " + why
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesIEC(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

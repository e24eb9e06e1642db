// Command shoal-receiver is a remote-write receiver backed by a real
// Prometheus TSDB: the endpoint `make demo` and the benchmark harness send
// to. It accepts Remote-Write 1.0 and 2.0 on /api/v1/write, answers PromQL on
// /api/v1/query and /api/v1/query_range, and never accepts out-of-order
// samples (it counts them instead, see /metrics and the status page).
//
// Flags (stable, scripts rely on them):
//
//	--web.listen-address  address to listen on (default 127.0.0.1:19291; port 0 picks one)
//	--storage.path        TSDB directory (default receiver-data/)
//	--log.level, --log.format
//
// On start it prints one "<name>: <URL>" line each for listen, write, query
// and status to standard output, so that scripts can read the address even
// when port 0 was asked for.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/oklog/run"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"

	"github.com/shoal-dev/shoal/internal/receiver"
)

// shutdownTimeout bounds how long in-flight requests may take once a
// signal arrived.
const shutdownTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "shoal-receiver:", err)
		os.Exit(1)
	}
}

type config struct {
	listenAddress string
	storagePath   string
	log           promslog.Config
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	app := kingpin.New("shoal-receiver", "Remote-write receiver backed by a Prometheus TSDB, for shoal's demo, tests and benchmarks.")
	app.HelpFlag.Short('h')
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	app.Flag("web.listen-address", "Address to listen on for remote write, queries and /metrics. Port 0 picks a free port.").
		Default("127.0.0.1:19291").StringVar(&c.listenAddress)
	app.Flag("storage.path", "Directory of the TSDB.").
		Default("receiver-data/").StringVar(&c.storagePath)
	promslogflag.AddFlags(app, &c.log)
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	return c, nil
}

// runMain runs the receiver until ctx ends, then shuts it down cleanly.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg.log.Writer = stderr
	logger := promslog.New(&cfg.log)

	rcv, err := receiver.New(cfg.storagePath, logger)
	if err != nil {
		return err
	}
	defer func() {
		if err := rcv.Close(); err != nil {
			logger.Error("Closing the TSDB", "err", err)
		}
	}()

	ln, err := net.Listen("tcp", cfg.listenAddress)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listenAddress, err)
	}
	base := "http://" + printableAddr(ln.Addr())
	fmt.Fprintf(stdout, "listen: %s\nwrite: %s/api/v1/write\nquery: %s/api/v1/query?query=up\nstatus: %s/\n", base, base, base, base)
	logger.Info("shoal-receiver started", "listen", base, "storage", cfg.storagePath)

	srv := &http.Server{
		Handler:           rcv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
	}

	var g run.Group
	g.Add(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, func(error) {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			logger.Warn("HTTP shutdown did not finish in time", "err", err)
			_ = srv.Close()
		}
	})
	// The signal actor: ends with ctx, or when the server failed on its own.
	sigCtx, cancel := context.WithCancel(ctx)
	g.Add(func() error {
		<-sigCtx.Done()
		logger.Info("Shutting down")
		return nil
	}, func(error) { cancel() })
	return g.Run()
}

// printableAddr turns a wildcard listen address into one a client can dial.
func printableAddr(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("localhost", fmt.Sprint(tcp.Port))
}

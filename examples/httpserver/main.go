// Command httpserver is a small HTTP API rate limited by ratewarden's
// httplimit middleware.
//
// By default it keeps its counters in memory (memstore): fine for one
// replica. Give it -redis to share one limit among every replica:
//
//	go run ./examples/httpserver                              # in memory
//	go run ./examples/httpserver -redis 127.0.0.1:6379        # shared via Redis
//	go run ./examples/httpserver -limit "5/10s fixed_window" -trusted 10.0.0.0/8
//
// Then: curl -i localhost:8080/hello (limited), localhost:8080/healthz (not).
// With Redis, the store is the library's recommended stack (package stack):
// the script store, the deny cache, and a failure policy that answers with
// this replica's share of the limit (-replicas) while Redis is unreachable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/ratewarden/ratewarden/stack"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	redisAddr := flag.String("redis", "", "Redis address (host:port); empty keeps counters in memory")
	limits := flag.String("limit", "10/1s token_bucket;1000/1d fixed_window", "limits per client, ';'-separated, in ratewarden.ParseLimit form")
	trusted := flag.String("trusted", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is trusted")
	replicas := flag.Int("replicas", 1, "replicas sharing the limit (sizes the local share during a Redis outage)")
	shadow := flag.Bool("shadow", false, "shadow mode: report over-limit requests but let them pass")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *addr, *redisAddr, *limits, *trusted, *replicas, *shadow); err != nil {
		log.Error("httpserver", "error", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, addr, redisAddr, limitSpec, trustedSpec string, replicas int, shadow bool) error {
	var lims []ratewarden.Limit
	for _, s := range strings.Split(limitSpec, ";") {
		l, err := ratewarden.ParseLimit(s)
		if err != nil {
			return fmt.Errorf("-limit: %w", err)
		}
		lims = append(lims, l)
	}
	var proxies []netip.Prefix
	for _, s := range strings.Split(trustedSpec, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("-trusted: %w", err)
		}
		proxies = append(proxies, p)
	}

	store, closeStore, err := openStore(log, redisAddr, replicas)
	if err != nil {
		return err
	}
	defer closeStore()
	lim, err := ratewarden.New(store)
	if err != nil {
		return err
	}
	h, err := handler(log, lim, lims, proxies, shadow)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("listening", "addr", addr, "limits", limitSpec, "redis", redisAddr, "shadow", shadow)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// handler is the rate limited API: /hello limited per client IP address,
// /healthz not limited.
func handler(log *slog.Logger, lim *ratewarden.Limiter, lims []ratewarden.Limit, proxies []netip.Prefix, shadow bool) (http.Handler, error) {
	// The key is the client's IP address only. Keying on a header the
	// client chooses, such as FirstOf(Header("X-API-Key"), ip), would let
	// any client escape its limit by sending a fresh made-up key with each
	// request. To limit per API key, key on the key only after your
	// authentication has checked it (e.g. a middleware before this one that
	// puts the verified key in the request context, read by WithKey).
	key, err := httplimit.ClientIP(httplimit.IPConfig{TrustedProxies: proxies})
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New(lim,
		httplimit.WithLimits(lims...),
		httplimit.WithKey(key),
		httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		httplimit.WithShadow(shadow),
		httplimit.WithLogger(log),
		httplimit.WithOnLimit(func(r *http.Request, info httplimit.Info) {
			log.Info("over the limit", "key", info.Key, "shadow", info.Shadow, "path", r.URL.Path)
		}),
	)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello; remaining: %s\n", w.Header().Get("X-RateLimit-Remaining"))
	})
	return mw.Handler(mux), nil
}

// openStore returns a memstore, or, given a Redis address, the Redis stack
// with a fallback holding this replica's share of each limit.
func openStore(log *slog.Logger, redisAddr string, replicas int, extra ...fallback.Option) (ratewarden.Store, func(), error) {
	if redisAddr == "" {
		st, err := memstore.New()
		if err != nil {
			return nil, nil, err
		}
		return st, func() { _ = st.Close() }, nil
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redisAddr}, DisableCache: true})
	if err != nil {
		return nil, nil, fmt.Errorf("-redis %s: %w", redisAddr, err)
	}
	st, err := stack.New(client, stack.WithFallback(append([]fallback.Option{
		fallback.WithPolicy(fallback.LocalFallback),
		fallback.WithReplicas(replicas),
		fallback.WithLogger(log)}, extra...)...))
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return st, client.Close, nil
}

// Package fleet is the demo's deployment, all on 127.0.0.1: API replicas
// (real net/http servers, each behind the httplimit middleware keyed by
// the client's X-Api-Key header) behind a real round-robin reverse proxy.
//
// Each replica decides on the store it is given: its own in-memory store
// for the "local" run, its own connection to a shared store otherwise.
// Every answer says which replica gave it (X-Demo-Replica, 1-based).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// Header names between the client, the proxy and the replicas.
const (
	// ClientHeader carries the client's API key: the key it is limited by.
	ClientHeader = "X-Api-Key"
	// ReplicaHeader tells the client which replica answered (1-based).
	ReplicaHeader = "X-Demo-Replica"
)

// ShutdownGrace bounds how long a server waits for requests in flight
// when the fleet closes.
const ShutdownGrace = 5 * time.Second

// Option configures Start. Options only record their value; Start
// validates what they collected and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the setting.
type Option func(*config)

// config is what the options of Start collect.
type config struct{ idle int }

// WithIdleConns keeps up to n idle proxy connections per replica (the
// client's requests in flight; default 16, at least 1).
func WithIdleConns(n int) Option { return func(c *config) { c.idle = n } }

// Fleet is the replicas and the proxy in front of them.
type Fleet struct {
	replicas []*server
	proxy    *server
	proxyTr  *http.Transport
}

// LimiterKey is the key a replica's middleware checks for a client that
// sends apiKey: what a store sees as Request.Key.
func LimiterKey(apiKey string) (string, error) {
	r, err := http.NewRequest(http.MethodGet, "/", nil)
	if err != nil {
		return "", fmt.Errorf("fleet: %w", err)
	}
	r.Header.Set(ClientHeader, apiKey)
	k, err := httplimit.Header(ClientHeader)(r)
	if err != nil {
		return "", fmt.Errorf("fleet: client key: %w", err)
	}
	return httplimit.DefaultRuleName + "|" + k, nil
}

// Start starts one replica per store, each limiting every client to limit,
// and the round-robin proxy in front of them. A store error answers 500
// (fail closed: never a free pass). The caller must Close the fleet; the
// stores stay the caller's.
func Start(limit ratewarden.Limit, stores []ratewarden.Store, opts ...Option) (*Fleet, error) {
	c := config{idle: 16}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("fleet: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	switch {
	case c.idle < 1:
		return nil, fmt.Errorf("fleet: idle connections must be at least 1, got %d: %w", c.idle, ratewarden.ErrInvalidConfig)
	case len(stores) == 0:
		return nil, fmt.Errorf("fleet: stores: need one per replica, got none: %w", ratewarden.ErrInvalidConfig)
	}
	f := &Fleet{}
	targets := make([]*url.URL, 0, len(stores))
	for i, st := range stores {
		s, err := startReplica(i+1, limit, st)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.replicas = append(f.replicas, s)
		targets = append(targets, &url.URL{Scheme: "http", Host: s.addr()})
	}
	f.proxyTr = &http.Transport{MaxIdleConnsPerHost: c.idle, IdleConnTimeout: 30 * time.Second}
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			n := next.Add(1) - 1
			pr.SetURL(targets[n%uint64(len(targets))])
			pr.SetXForwarded()
		},
		Transport: f.proxyTr,
		ErrorLog:  discardLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p, err := listen(rp)
	if err != nil {
		f.Close()
		return nil, err
	}
	f.proxy = p
	return f, nil
}

// startReplica serves replica id (1-based) deciding on st.
func startReplica(id int, limit ratewarden.Limit, st ratewarden.Store) (*server, error) {
	lim, err := ratewarden.New(st)
	if err != nil {
		return nil, fmt.Errorf("fleet: replica %d: %w", id, err)
	}
	mw, err := httplimit.New(lim,
		httplimit.WithLimits(limit),
		httplimit.WithKey(httplimit.Header(ClientHeader)),
		httplimit.WithFailClosed(true), // a store error is an error here, not a free pass
		httplimit.WithLogger(slog.New(slog.DiscardHandler)),
	)
	if err != nil {
		return nil, fmt.Errorf("fleet: replica %d: %w", id, err)
	}
	name := strconv.Itoa(id)
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "hello from replica "+name+"\n")
	}))
	return listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ReplicaHeader, name)
		api.ServeHTTP(w, r)
	}))
}

// URL is where the client sends its requests: the proxy.
func (f *Fleet) URL() string { return "http://" + f.proxy.addr() + "/hello" }

// Addrs lists every address the fleet listens on: the replicas', then
// the proxy's.
func (f *Fleet) Addrs() []string {
	var out []string
	for _, r := range f.replicas {
		out = append(out, r.addr())
	}
	if f.proxy != nil {
		out = append(out, f.proxy.addr())
	}
	return out
}

// Close stops the proxy, then the replicas (each lets requests in flight
// finish, up to ShutdownGrace), and drops idle connections. Every
// goroutine the fleet started has ended when it returns.
func (f *Fleet) Close() {
	if f.proxy != nil {
		f.proxy.shutdown()
	}
	if f.proxyTr != nil {
		f.proxyTr.CloseIdleConnections()
	}
	for _, r := range f.replicas {
		r.shutdown()
	}
}

// server is one loopback HTTP server and its serving goroutine.
type server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

var discardLog = log.New(io.Discard, "", 0)

// listen starts serving h on a free loopback port.
func listen(h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fleet: listen: %w", err)
	}
	s := &server{
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: discardLog},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return s, nil
}

func (s *server) addr() string { return s.ln.Addr().String() }

// shutdown lets requests in flight finish (up to ShutdownGrace), then
// closes everything, and waits for the serving goroutine.
func (s *server) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/tlsfiles"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/xds"
)

// xdsSettings are the xDS client's, with --config-type xds.
type xdsSettings struct {
	server, nodeID string
	metadata       map[string]string
	headers        map[string]string
	initial, max   time.Duration
	maxMsg         int
	useTLS         bool
	tlsSAN         string // the name the server's certificate must have
	tls            tlsfiles.Client
}

// deployment parses the flags of how the service is deployed: where its
// config comes from, TLS, near-limit statistics.
func (f serveFlags) deployment(st *settings) error {
	r, err := strconv.ParseFloat(*f.nearRatio, 64)
	if err != nil || !(r > 0 && r <= 1) {
		return fmt.Errorf("--near-limit-ratio %q: want a number above 0, at most 1", *f.nearRatio)
	}
	st.nearRatio = r
	switch strings.ToUpper(*f.configType) {
	case "FILE":
	case "XDS", "GRPC_XDS_SOTW":
		if st.configPaths != nil {
			return fmt.Errorf("--config and --config-type %s: the Envoy domains come from one or the other", *f.configType)
		}
		if st.xds, err = f.xdsSettings(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--config-type %q: want file or xds (GRPC_XDS_SOTW)", *f.configType)
	}
	st.tls = tlsfiles.Server{CertFile: *f.tlsCert, KeyFile: *f.tlsKey, ClientCAFile: *f.tlsClientCA, ClientSAN: f.getenv("GRPC_CLIENT_TLS_SAN")}
	for _, s := range strings.Split(*f.tlsServers, ",") {
		switch strings.TrimSpace(s) {
		case "grpc":
			st.tlsGRPC = true
		case "http":
			st.tlsHTTP = true
		default:
			return fmt.Errorf("--tls-servers %q: want grpc, http or grpc,http", *f.tlsServers)
		}
	}
	skip, _ := strconv.ParseBool(f.getenv("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"))
	st.redisTLS = tlsfiles.Client{CAFile: *f.redisCA, CertFile: *f.redisCert, KeyFile: *f.redisKey, SkipHostname: skip}
	return nil
}

// xdsSettings reads the xDS client's settings: the flags, and
// envoyproxy/ratelimit's variables for the rest.
func (f serveFlags) xdsSettings() (*xdsSettings, error) {
	get := f.getenv
	x := &xdsSettings{server: *f.xdsServer, nodeID: *f.xdsNode, initial: xds.DefaultBackoffInitial, max: xds.DefaultBackoffMax,
		metadata: xds.ParseMetadata(get("CONFIG_GRPC_XDS_NODE_METADATA")),
		tlsSAN:   get("CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
		tls: tlsfiles.Client{CAFile: get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
			CertFile: get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"), KeyFile: get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")}}
	var err error
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", &x.initial}, {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", &x.max}} {
		if v := get(d.env); v != "" {
			if *d.dst, err = duration(d.env, v, false); err != nil {
				return nil, err
			}
		}
	}
	if v := get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"); v != "" {
		if x.maxMsg, err = strconv.Atoi(v); err != nil || x.maxMsg < 0 {
			return nil, fmt.Errorf("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES %q: want a whole number", v)
		}
	}
	if v := get("CONFIG_GRPC_XDS_SERVER_USE_TLS"); v != "" {
		if x.useTLS, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_USE_TLS %q: want true or false", v)
		}
	}
	// envconfig's map form: "k1:v1,k2:v2".
	if v := get("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"); v != "" {
		x.headers = map[string]string{}
		for _, item := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(item, ":")
			if !ok {
				return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: %q is not key:value", item)
			}
			x.headers[k] = val
		}
	}
	return x, nil
}

// clientOptions are the xds.Client's options for x.
func (x *xdsSettings) clientOptions() ([]xds.Option, error) {
	opts := []xds.Option{xds.WithNode(x.nodeID, x.metadata), xds.WithHeaders(x.headers), xds.WithBackoff(x.initial, max(x.max, x.initial)), xds.WithMaxRecvMsgSize(x.maxMsg)}
	if !x.useTLS {
		return opts, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.tlsSAN}
	if err := x.tls.Apply(tc); err != nil {
		return nil, fmt.Errorf("xds TLS (CONFIG_GRPC_XDS_SERVER_TLS_CACERT, CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY): %w", err)
	}
	return append(opts, xds.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(tc)))), nil
}

// tlsOptions are the server's TLS options for st: none when no TLS file
// is given; server.New checks the files.
func (st settings) tlsOptions() []server.Option {
	if !st.tls.Given() {
		return nil
	}
	var on server.TLSServers
	if st.tlsGRPC {
		on |= server.TLSGRPC
	}
	if st.tlsHTTP {
		on |= server.TLSHTTP
	}
	return []server.Option{server.WithTLS(st.tls, on)}
}

// startXDS makes the xDS client that keeps the server's Envoy domains,
// the built-in native policies beside them, and runs it until the
// returned stop is called.
func (s *service) startXDS() (stop func(), err error) {
	x := s.st.xds
	opts, err := x.clientOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts, xds.WithLogger(s.log), xds.WithMergeDomains(s.st.envoy.MergeDomains))
	apply := func(u xds.Update) error {
		cfg := u.Config
		if len(cfg.Policies) == 0 {
			cfg.Policies = s.builtin.Policies
		}
		if cfg.Policies == nil {
			cfg.Policies = map[string]*config.Policy{}
		}
		return s.srv.SetConfig(cfg, "xds", u.Version)
	}
	c, err := xds.New(x.server, apply, opts...)
	if err != nil {
		return nil, err
	}
	if err := registerXDSMetrics(s.srv.Registry(), c); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	s.log.Info("taking Envoy domains from the xDS management server", "server", x.server, "node", x.nodeID)
	return func() { cancel(); <-done }, nil
}

// registerXDSMetrics exports the xDS client's state on reg:
// ratewarden_xds_connected and ratewarden_xds_updates_total{result}.
func registerXDSMetrics(reg *prometheus.Registry, c *xds.Client) error {
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ratewarden_xds_connected",
		Help: "1 while the stream to the xDS management server is open.",
	}, func() float64 {
		if c.Status().Connected {
			return 1
		}
		return 0
	})
	accepted := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ratewarden_xds_updates_total", Help: "xDS configurations received, by result: accepted (ACK) or rejected (NACK, the config in force kept).",
		ConstLabels: prometheus.Labels{"result": "accepted"},
	}, func() float64 { return float64(c.Status().Accepted) })
	rejected := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ratewarden_xds_updates_total", Help: "xDS configurations received, by result: accepted (ACK) or rejected (NACK, the config in force kept).",
		ConstLabels: prometheus.Labels{"result": "rejected"},
	}, func() float64 { return float64(c.Status().Rejected) })
	for _, m := range []prometheus.Collector{connected, accepted, rejected} {
		if err := reg.Register(m); err != nil {
			return fmt.Errorf("xds metrics: %w", err)
		}
	}
	return nil
}

// Package xds takes the service's Envoy domains from an xDS management
// server, as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW:
// state-of-the-world resources of type
// ratelimit.config.ratelimit.v3.RateLimitConfig (go-control-plane's types)
// over the aggregated discovery service.
//
// A Client keeps one stream to the server. Each response is the whole
// configuration: Convert checks it as a config file is checked, then the
// Client hands it to its apply function. A response that does not decode,
// does not check, or that apply refuses is answered with a NACK carrying
// the reason, and the configuration in force stays; any other is ACKed.
// When the stream breaks the Client dials again after a backoff
// (exponential with jitter, reset once a response arrives), asking for
// the last version it accepted, so a restarting server never takes a
// configuration away.
package xds

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratewarden/ratewarden"
	svcconfig "github.com/ratewarden/ratewarden/service/config"
)

// TypeURL is the resource type the Client asks for.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Defaults, as envoyproxy/ratelimit's.
const (
	DefaultNodeID         = "default"
	DefaultBackoffInitial = 10 * time.Second
	DefaultBackoffMax     = 60 * time.Second
)

// Update is one configuration the management server sent.
type Update struct {
	// Version is the response's version_info.
	Version string
	// Config holds one Envoy domain per resource.
	Config *svcconfig.Config
	// Resources are the resources' names, in the order sent.
	Resources []string
}

// Option configures a Client. Options only record their value; New
// validates what they collected and fails with an error wrapping
// ratewarden.ErrInvalidConfig that names the option at fault. When an
// option is given twice, the last one counts.
type Option func(*config)

// config is what the options of New collect, on top of its defaults.
type config struct {
	nodeID         string
	metadata       map[string]string
	headers        map[string]string
	dial           []grpc.DialOption
	initial, max   time.Duration
	merge          bool
	log            *slog.Logger
	onStatus       func(Status)
	maxRecvMsgSize int
}

// WithNode sets the node the Client announces: its id (default
// "default") and string metadata (CONFIG_GRPC_XDS_NODE_ID and
// CONFIG_GRPC_XDS_NODE_METADATA for envoyproxy/ratelimit).
func WithNode(id string, metadata map[string]string) Option {
	return func(c *config) { c.nodeID, c.metadata = id, metadata }
}

// WithHeaders adds gRPC metadata to the stream (authorization, say).
func WithHeaders(h map[string]string) Option {
	return func(c *config) { c.headers = h }
}

// WithDialOptions sets the gRPC dial options; the default is a plaintext
// connection. Give grpc.WithTransportCredentials for TLS.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dial = opts }
}

// WithBackoff sets the wait before dialing again after the stream broke:
// initial, doubling on each failure up to max, each wait drawn between
// half and all of it. Defaults 10s and 60s.
func WithBackoff(initial, max time.Duration) Option {
	return func(c *config) { c.initial, c.max = initial, max }
}

// WithMergeDomains merges resources of one domain instead of refusing
// the second (MERGE_DOMAIN_CONFIG).
func WithMergeDomains(merge bool) Option {
	return func(c *config) { c.merge = merge }
}

// WithMaxRecvMsgSize bounds a response's bytes; default gRPC's 4 MiB.
func WithMaxRecvMsgSize(n int) Option {
	return func(c *config) { c.maxRecvMsgSize = n }
}

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.log = l }
}

// WithStatus calls f after every response and every broken stream with
// the Client's state (for metrics); f must not block.
func WithStatus(f func(Status)) Option {
	return func(c *config) { c.onStatus = f }
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{nodeID: DefaultNodeID, initial: DefaultBackoffInitial, max: DefaultBackoffMax, log: slog.Default()}
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("xds: option %d is nil: %w", i, ratewarden.ErrInvalidConfig)
		}
		o(&c)
	}
	var msg string
	switch {
	case c.initial <= 0 || c.max < c.initial:
		msg = fmt.Sprintf("WithBackoff: want 0 < initial <= max, got %v, %v", c.initial, c.max)
	case c.log == nil:
		msg = "WithLogger: logger must not be nil"
	default:
		return c, nil
	}
	return config{}, fmt.Errorf("xds: %s: %w", msg, ratewarden.ErrInvalidConfig)
}

// Status is what a Client has done so far.
type Status struct {
	// Version is the version in force: the last one accepted.
	Version string
	// Connected reports whether a stream is open.
	Connected bool
	// Accepted and Rejected count the versions ACKed and NACKed (a
	// refused version the server sends again is not counted again).
	Accepted, Rejected int
	// LastError is the reason of the last NACK or broken stream.
	LastError string
}

// Client is an xDS state-of-the-world client for RateLimitConfig
// resources. Make one with New and call Run.
type Client struct {
	o     config
	conn  *grpc.ClientConn
	apply func(Update) error

	mu sync.Mutex
	st Status
}

// New returns a Client for the management server at target (a gRPC
// target such as "xds.internal:18000"), calling apply with each update
// that checks; an error from apply NACKs the update. It does not connect
// yet. Errors wrap ratewarden.ErrInvalidConfig.
func New(target string, apply func(Update) error, opts ...Option) (*Client, error) {
	switch {
	case target == "":
		return nil, fmt.Errorf("xds: no management server address: %w", ratewarden.ErrInvalidConfig)
	case apply == nil:
		return nil, fmt.Errorf("xds: apply must not be nil: %w", ratewarden.ErrInvalidConfig)
	}
	o, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	dial := o.dial
	if len(dial) == 0 {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	if o.maxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.maxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("xds: %s: %v: %w", target, err, ratewarden.ErrInvalidConfig)
	}
	return &Client{o: o, conn: conn, apply: apply}, nil
}

// Status returns what the Client has done so far.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

func (c *Client) update(f func(*Status)) {
	c.mu.Lock()
	f(&c.st)
	st := c.st
	c.mu.Unlock()
	if c.o.onStatus != nil {
		c.o.onStatus(st)
	}
}

// Run streams until ctx is done, dialing again after a backoff whenever
// the stream breaks, then closes the connection. It returns nil when ctx
// ends.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	wait := c.o.initial
	for {
		got, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			wait = c.o.initial
		}
		d := wait/2 + rand.N(wait/2+1)
		c.update(func(s *Status) { s.Connected, s.LastError = false, err.Error() })
		c.o.log.Warn("xds: stream to the management server ended; keeping the configuration in force", "err", err, "retry_in", d, "version", c.Status().Version)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(wait*2, c.o.max)
	}
}

// stream runs one stream until it breaks; got reports whether a
// response arrived on it.
func (c *Client) stream(ctx context.Context) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.o.headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(c.o.headers))
	}
	st, err := discoverypb.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	// The first request asks for everything, saying what is in force.
	if err := st.Send(&discoverypb.DiscoveryRequest{Node: c.node(), TypeUrl: TypeURL, VersionInfo: c.Status().Version}); err != nil {
		return false, err
	}
	var last rejected
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		if !got {
			got = true
			c.update(func(s *Status) { s.Connected = true })
		}
		req := c.answer(resp, &last)
		if req.ErrorDetail != nil && last.repeats > 0 {
			// A management server answers a NACK by sending the version
			// again at once (go-control-plane's cache does): pace the
			// repeated NACKs so the two do not spin.
			t := time.NewTimer(min(c.o.initial, time.Second))
			select {
			case <-sctx.Done():
				t.Stop()
				return got, sctx.Err()
			case <-t.C:
			}
		}
		if err := st.Send(req); err != nil {
			return got, err
		}
	}
}

// rejected is the last version a stream NACKed, and how many times in a
// row it came again.
type rejected struct {
	version, reason string
	repeats         int
}

// answer applies resp and returns its ACK or NACK. A version NACKed
// just before (last) is NACKed again with the same reason, unchecked and
// logged at debug level.
func (c *Client) answer(resp *discoverypb.DiscoveryResponse, last *rejected) *discoverypb.DiscoveryRequest {
	req := &discoverypb.DiscoveryRequest{Node: c.node(), TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
	nack := func(reason string) *discoverypb.DiscoveryRequest {
		req.VersionInfo = c.Status().Version
		req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: reason}
		return req
	}
	if last.reason != "" && resp.GetVersionInfo() == last.version {
		last.repeats++
		c.o.log.Debug("xds: the refused version again; NACK", "version", last.version, "times", last.repeats)
		return nack(last.reason)
	}
	u, err := decode(resp, c.o.merge)
	if err == nil {
		err = c.apply(u)
	}
	if err != nil {
		*last = rejected{version: resp.GetVersionInfo(), reason: err.Error()}
		c.update(func(s *Status) { s.Rejected++; s.LastError = err.Error() })
		c.o.log.Error("xds: configuration refused (NACK); keeping the configuration in force", "version", resp.GetVersionInfo(), "err", err)
		return nack(err.Error())
	}
	*last = rejected{}
	c.update(func(s *Status) { s.Accepted++; s.Version = u.Version })
	c.o.log.Info("xds: configuration accepted", "version", u.Version, "resources", len(u.Resources), "domains", len(u.Config.Domains))
	req.VersionInfo = u.Version
	return req
}

// decode unpacks and checks a response.
func decode(resp *discoverypb.DiscoveryResponse, merge bool) (Update, error) {
	u := Update{Version: resp.GetVersionInfo()}
	if resp.GetTypeUrl() != TypeURL {
		return u, fmt.Errorf("xds: response of type %q, want %q: %w", resp.GetTypeUrl(), TypeURL, ratewarden.ErrInvalidConfig)
	}
	rs := make([]*rlsconfpb.RateLimitConfig, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		r := &rlsconfpb.RateLimitConfig{}
		if err := a.UnmarshalTo(r); err != nil {
			return u, fmt.Errorf("xds: resource %d: %v: %w", i, err, ratewarden.ErrInvalidConfig)
		}
		rs = append(rs, r)
		u.Resources = append(u.Resources, r.GetName())
	}
	cfg, err := Convert(rs, merge)
	if err != nil {
		return u, err
	}
	u.Config = cfg
	return u, nil
}

func (c *Client) node() *corepb.Node {
	n := &corepb.Node{Id: c.o.nodeID}
	if len(c.o.metadata) > 0 {
		n.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range c.o.metadata {
			n.Metadata.Fields[k] = structpb.NewStringValue(v)
		}
	}
	return n
}

// ParseMetadata reads node metadata as envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_NODE_METADATA does: "k1=v1,k2=v2"; an item without "="
// is skipped.
func ParseMetadata(s string) map[string]string {
	m := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(item, "="); ok {
			m[k] = v
		}
	}
	return m
}

package peerdiff

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// h2Conn is a gRPC client connection cut down to what the load needs, so
// that the callers cost little CPU beside the services they measure:
// unary ShouldRateLimit calls over one HTTP/2 connection without TLS
// (prior knowledge, as the services' gRPC ports are plaintext). A call
// sends a header block encoded once per caller and one DATA frame of a
// request marshalled once per caller; the answers are read by one
// goroutine and the frames written by another, which writes what
// several callers queued in one write.
//
// It keeps HTTP/2's rules that matter here: it opens streams in order
// and no more at once than the server's SETTINGS_MAX_CONCURRENT_STREAMS,
// sends DATA only within the server's connection and stream windows,
// answers SETTINGS and PING, gives the server back the window its DATA
// used, and treats RST_STREAM and GOAWAY as failures of the streams
// they end. Its own windows are large (1 GiB) and an answer is capped
// at h2MaxAnswer, well inside the stream window the server starts
// with, so no stream ever waits for a window update of ours.
//
// The mutex is never held during I/O, so the reader never waits for a
// write to finish, nor a caller for a read.
type h2Conn struct {
	nc net.Conn

	mu         sync.Mutex
	cond       *sync.Cond // a stream slot or send window freed, or the connection failed
	wfr        *http2.Framer
	wq         appendWriter // frames queued for the writer
	kicked     bool         // the writer has been told about wq
	nextID     uint32
	active     uint32 // streams open: sent and not yet ended by the server
	maxStreams uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	sendWin    int64  // the connection's send window
	streamWin  int64  // the server's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame   uint32 // the server's SETTINGS_MAX_FRAME_SIZE
	streams    map[uint32]*h2Flight
	err        error // why the connection failed; nil while it works
	goaway     error // why no new stream may start; nil while they may

	kick chan struct{} // wq has frames
	quit chan struct{} // closed by close
	wg   sync.WaitGroup

	// The reader's own.
	rfr    *http2.Framer
	dec    *hpack.Decoder
	hdr    h2Headers // the header block being decoded
	hdrID  uint32    // its stream
	hdrEnd bool      // its HEADERS frame ended the stream
	recvd  int64     // DATA received since the last connection WINDOW_UPDATE
}

// h2Headers is what an answer's header block says that matters.
type h2Headers struct {
	status, contentType, grpcStatus, grpcMessage string
	hasGRPCStatus                                bool
}

// appendWriter collects what is written to it.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// The windows this client gives the server, and the most of an answer
// it takes: far less than the 65535 octets any stream window starts
// with, so the server never waits on one.
const (
	h2Window    = 1 << 30
	h2MaxAnswer = 16 << 10
)

const rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// errH2Closed ends the calls a closing connection still has.
var errH2Closed = errors.New("peerdiff: h2 connection closed")

// dialH2 connects to the gRPC server at addr and exchanges the
// connection prefaces: its SETTINGS and a connection window of
// h2Window, then the server's SETTINGS, which it acknowledges.
func dialH2(addr string) (*h2Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("peerdiff: h2 dial %s: %w", addr, err)
	}
	c := &h2Conn{
		nc: nc, nextID: 1, maxStreams: ^uint32(0), sendWin: 65535, streamWin: 65535, maxFrame: 16384,
		streams: map[uint32]*h2Flight{}, kick: make(chan struct{}, 1), quit: make(chan struct{}),
	}
	c.cond = sync.NewCond(&c.mu)
	c.wfr = http2.NewFramer(&c.wq, nil)
	c.rfr = http2.NewFramer(nil, bufio.NewReaderSize(nc, 64<<10))
	c.rfr.SetReuseFrames()
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(h2MaxAnswer)
	if err := c.handshake(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("peerdiff: h2 handshake with %s: %w", addr, err)
	}
	c.wg.Add(2) // the SETTINGS ACK is queued already
	go c.read()
	go c.write()
	return c, nil
}

// handshake writes the client preface and reads the server's SETTINGS,
// within 10s.
func (c *h2Conn) handshake() error {
	if err := c.nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	c.wq.b = append(c.wq.b, http2.ClientPreface...)
	_ = c.wfr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2Window})
	_ = c.wfr.WriteWindowUpdate(0, h2Window-65535)
	if _, err := c.nc.Write(c.wq.b); err != nil {
		return err
	}
	c.wq.b = c.wq.b[:0]
	f, err := c.rfr.ReadFrame()
	if err != nil {
		return err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("first frame %v, want SETTINGS", f.Header())
	}
	if err := c.settings(sf); err != nil {
		return err
	}
	return c.nc.SetDeadline(time.Time{})
}

// close ends the connection and its goroutines; calls still waiting fail.
func (c *h2Conn) close() {
	c.fail(errH2Closed)
	close(c.quit)
	c.wg.Wait()
}

// fail ends the connection for err (the first reason stays): the calls
// waiting get it, and so do the calls after.
func (c *h2Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	ended := c.streams
	c.streams = map[uint32]*h2Flight{}
	c.active = 0
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
	for _, f := range ended {
		f.finish(0, err)
	}
}

// flushLocked has the writer write the queued frames; c.mu is held.
func (c *h2Conn) flushLocked() {
	if c.kicked {
		return
	}
	c.kicked = true
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// write writes the queued frames until the connection closes. Told of
// new frames, it first lets the other runnable goroutines run, so that
// the callers an answer woke queue their next requests too and one
// write carries them all: the write, a system call, is most of a
// call's cost.
func (c *h2Conn) write() {
	defer c.wg.Done()
	var out []byte
	for {
		select {
		case <-c.kick:
		case <-c.quit:
			return
		}
		runtime.Gosched()
		c.mu.Lock()
		out, c.wq.b = c.wq.b, out[:0]
		c.kicked = false
		c.mu.Unlock()
		if _, err := c.nc.Write(out); err != nil {
			c.fail(fmt.Errorf("peerdiff: h2 write: %w", err))
			return
		}
	}
}

// read reads and handles the server's frames until the connection fails.
func (c *h2Conn) read() {
	defer c.wg.Done()
	for {
		f, err := c.rfr.ReadFrame()
		if err == nil {
			err = c.handle(f)
		}
		if err != nil {
			c.fail(fmt.Errorf("peerdiff: h2 read: %w", err))
			return
		}
	}
}

// handle handles one frame from the server.
func (c *h2Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.data(f)
	case *http2.HeadersFrame:
		c.hdr, c.hdrID, c.hdrEnd = h2Headers{}, f.StreamID, f.StreamEnded()
		return c.headerBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		return c.headerBlock(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.settings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			_ = c.wfr.WritePing(true, f.Data)
			c.flushLocked()
			c.mu.Unlock()
		}
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 { // a stream's: it sends one DATA frame, within the initial window
			c.mu.Lock()
			c.sendWin += int64(f.Increment)
			c.cond.Broadcast()
			c.mu.Unlock()
		}
	case *http2.RSTStreamFrame:
		c.end(f.StreamID, 0, 0, fmt.Errorf("peerdiff: h2: stream reset by the server: %v", f.ErrCode))
	case *http2.GoAwayFrame:
		c.goAway(f)
	case *http2.PushPromiseFrame:
		return errors.New("PUSH_PROMISE, which SETTINGS_ENABLE_PUSH 0 forbids")
	}
	return nil // PRIORITY and unknown frames: nothing to do
}

// settings applies the server's SETTINGS and acknowledges them.
func (c *h2Conn) settings(f *http2.SettingsFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
		case http2.SettingInitialWindowSize:
			c.streamWin = int64(s.Val)
		case http2.SettingMaxFrameSize:
			c.maxFrame = s.Val
		}
		return s.Valid()
	})
	if err != nil {
		return err
	}
	c.cond.Broadcast()
	_ = c.wfr.WriteSettingsAck()
	c.flushLocked()
	return nil
}

// goAway stops new streams and fails the ones the server will not answer.
func (c *h2Conn) goAway(f *http2.GoAwayFrame) {
	err := fmt.Errorf("peerdiff: h2: GOAWAY %v %q", f.ErrCode, f.DebugData())
	c.mu.Lock()
	c.goaway = err
	var ids []uint32
	for id := range c.streams {
		if id > f.LastStreamID {
			ids = append(ids, id)
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	for _, id := range ids {
		c.end(id, 0, 0, err)
	}
}

// emit records a decoded header field of the block being decoded.
func (c *h2Conn) emit(f hpack.HeaderField) {
	switch f.Name {
	case ":status":
		c.hdr.status = f.Value
	case "content-type":
		c.hdr.contentType = f.Value
	case "grpc-status":
		c.hdr.grpcStatus, c.hdr.hasGRPCStatus = f.Value, true
	case "grpc-message":
		c.hdr.grpcMessage = f.Value
	}
}

// headerBlock decodes a fragment of a header block, and when the block
// is complete acts on it: an answer's headers, or its trailers, which
// end the call. Every block is decoded, a stream's this client gave up
// on too: the server's encoder state depends on it.
func (c *h2Conn) headerBlock(frag []byte, ended bool) error {
	if _, err := c.dec.Write(frag); err != nil {
		return err
	}
	if !ended {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return err
	}
	c.mu.Lock()
	f := c.streams[c.hdrID]
	c.mu.Unlock()
	if f == nil {
		return nil
	}
	h := c.hdr
	if !f.gotHeaders {
		f.gotHeaders = true
		if h.status != "200" || !strings.HasPrefix(h.contentType, "application/grpc") {
			c.end(c.hdrID, http2.ErrCodeCancel, 0, fmt.Errorf("peerdiff: h2: answer with HTTP status %q, content-type %q", h.status, h.contentType))
			return nil
		}
		if !c.hdrEnd {
			return nil // the message and trailers follow
		}
	} else if !c.hdrEnd {
		c.end(c.hdrID, http2.ErrCodeProtocol, 0, errors.New("peerdiff: h2: trailers without END_STREAM"))
		return nil
	}
	code, err := f.answer(h)
	c.end(c.hdrID, 0, code, err)
	return nil
}

// data takes a DATA frame: the window it used goes back to the server
// (the connection's; the stream's never runs out, see h2MaxAnswer), and
// its bytes to its call.
func (c *h2Conn) data(f *http2.DataFrame) error {
	if c.recvd += int64(f.Length); c.recvd >= h2Window/2 {
		c.mu.Lock()
		_ = c.wfr.WriteWindowUpdate(0, uint32(c.recvd))
		c.flushLocked()
		c.mu.Unlock()
		c.recvd = 0
	}
	c.mu.Lock()
	fl := c.streams[f.StreamID]
	c.mu.Unlock()
	if fl == nil {
		return nil
	}
	switch {
	case !fl.gotHeaders:
		c.end(f.StreamID, http2.ErrCodeProtocol, 0, errors.New("peerdiff: h2: DATA before headers"))
	case len(fl.msg)+len(f.Data()) > h2MaxAnswer:
		c.end(f.StreamID, http2.ErrCodeCancel, 0, fmt.Errorf("peerdiff: h2: answer over %d bytes", h2MaxAnswer))
	default:
		fl.msg = append(fl.msg, f.Data()...)
		if f.StreamEnded() {
			c.end(f.StreamID, 0, 0, errors.New("peerdiff: h2: stream ended without trailers"))
		}
	}
	return nil
}

// end ends stream id with its outcome, code or err, and resets it with
// rst when not 0. A stream already ended is left alone.
func (c *h2Conn) end(id uint32, rst http2.ErrCode, code rlspb.RateLimitResponse_Code, err error) {
	c.mu.Lock()
	f := c.streams[id]
	if f == nil {
		c.mu.Unlock()
		return
	}
	delete(c.streams, id)
	c.active--
	c.cond.Broadcast()
	if rst != 0 {
		_ = c.wfr.WriteRSTStream(id, rst)
		c.flushLocked()
	}
	c.mu.Unlock()
	f.finish(code, err)
}

// h2Call is a caller's request, prepared once and sent again and again.
// A caller has one call at a time.
type h2Call struct {
	c      *h2Conn
	block  []byte // the HEADERS block
	body   []byte // the DATA: the gRPC message
	flight *h2Flight
}

// h2Flight is a call in flight: the reader's until it ends the stream
// and signals done, then the caller's again. A caller that gives up on a
// call leaves its flight to the reader and takes a new one.
type h2Flight struct {
	id         uint32
	done       chan struct{}
	gotHeaders bool
	msg        []byte // the answer's DATA so far
	code       rlspb.RateLimitResponse_Code
	err        error
}

func newFlight() *h2Flight { return &h2Flight{done: make(chan struct{}, 1)} }

// prepare makes req into a call on c. The header block has grpc-timeout
// for ctx's deadline when it has one, as grpc-go and Envoy send it (the
// services then keep a deadline per request), and is encoded without
// the dynamic table, so every stream can send it as it is.
func (c *h2Conn) prepare(ctx context.Context, req *rlspb.RateLimitRequest) (*h2Call, error) {
	m, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("peerdiff: h2: marshal request: %w", err)
	}
	body := make([]byte, 5, 5+len(m)) // uncompressed, then the length
	binary.BigEndian.PutUint32(body[1:], uint32(len(m)))
	body = append(body, m...)
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	enc.SetMaxDynamicTableSizeLimit(0)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: rlsPath},
		{Name: ":authority", Value: c.nc.RemoteAddr().String()}, {Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
	if dl, ok := ctx.Deadline(); ok {
		secs := int64(time.Until(dl)/time.Second) + 1
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: strconv.FormatInt(min(secs, 99999999), 10) + "S"})
	}
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			return nil, err
		}
	}
	return &h2Call{c: c, block: b.Bytes(), body: body, flight: newFlight()}, nil
}

func (f *h2Flight) finish(code rlspb.RateLimitResponse_Code, err error) {
	f.code, f.err = code, err
	f.done <- struct{}{}
}

// answer is the outcome the answer's final header block h and its
// message give: the overall code, or the status error grpc-go's client
// would return.
func (f *h2Flight) answer(h h2Headers) (rlspb.RateLimitResponse_Code, error) {
	if !h.hasGRPCStatus {
		return 0, errors.New("peerdiff: h2: answer without grpc-status")
	}
	st, err := strconv.ParseUint(h.grpcStatus, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("peerdiff: h2: grpc-status %q: %w", h.grpcStatus, err)
	}
	if st != 0 {
		return 0, status.Error(codes.Code(st), decodeGRPCMessage(h.grpcMessage))
	}
	m := f.msg
	if len(m) < 5 || m[0] != 0 || int(binary.BigEndian.Uint32(m[1:5])) != len(m)-5 {
		return 0, fmt.Errorf("peerdiff: h2: answer of %d bytes is not one uncompressed gRPC message", len(m))
	}
	return overallCode(m[5:])
}

// call sends k once and waits for its answer or for ctx to end: the
// overall code, or the error (a status error for a non-OK grpc-status).
func (k *h2Call) call(ctx context.Context) (rlspb.RateLimitResponse_Code, error) {
	c, f := k.c, k.flight
	f.gotHeaders, f.msg = false, f.msg[:0]
	c.mu.Lock()
	if err := c.open(ctx, k); err != nil {
		c.mu.Unlock()
		return 0, err
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.code, f.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if c.streams[f.id] != f {
		c.mu.Unlock()
		<-f.done // being ended now: take the outcome
		return f.code, f.err
	}
	delete(c.streams, f.id)
	c.active--
	c.cond.Broadcast()
	_ = c.wfr.WriteRSTStream(f.id, http2.ErrCodeCancel)
	c.flushLocked()
	c.mu.Unlock()
	k.flight = newFlight() // the reader may still be writing to f
	return 0, ctx.Err()
}

// open waits for a stream slot and the window for k's DATA, then queues
// its HEADERS and DATA on a new stream; c.mu is held.
func (c *h2Conn) open(ctx context.Context, k *h2Call) error {
	n := int64(len(k.body))
	if n > c.streamWin || uint32(n) > c.maxFrame || uint32(len(k.block)) > c.maxFrame {
		return fmt.Errorf("peerdiff: h2: request of %d bytes, header block of %d; the server takes frames of %d, a stream window of %d",
			n, len(k.block), c.maxFrame, c.streamWin)
	}
	if c.err == nil && c.goaway == nil && (c.active >= c.maxStreams || c.sendWin < n) {
		stop := context.AfterFunc(ctx, func() { // rare: wake the wait below when ctx ends
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
		for c.err == nil && c.goaway == nil && ctx.Err() == nil && (c.active >= c.maxStreams || c.sendWin < n) {
			c.cond.Wait()
		}
		stop()
	}
	switch {
	case c.err != nil:
		return c.err
	case c.goaway != nil:
		return c.goaway
	case ctx.Err() != nil:
		return ctx.Err()
	case c.nextID >= 1<<31:
		return errors.New("peerdiff: h2: stream ids used up")
	}
	id := c.nextID
	c.nextID += 2
	c.active++
	c.sendWin -= n
	k.flight.id = id
	c.streams[id] = k.flight
	_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: k.block, EndHeaders: true})
	_ = c.wfr.WriteData(id, true, k.body)
	c.flushLocked()
	return nil
}

// overallCode reads field 1 (overall_code) of an envoy
// RateLimitResponse, skipping the others: all the load looks at, without
// decoding the rest.
func overallCode(b []byte) (rlspb.RateLimitResponse_Code, error) {
	var code uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("peerdiff: h2: answer: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			code, n = protowire.ConsumeVarint(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return 0, fmt.Errorf("peerdiff: h2: answer: field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return rlspb.RateLimitResponse_Code(code), nil
}

// decodeGRPCMessage undoes grpc-message's percent-encoding: %XX is the
// octet XX; a % not followed by two hex digits stays as it is.
func decodeGRPCMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

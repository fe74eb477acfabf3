package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// evaluator is the seam between the Store and a Redis client: run the
// script once, or delete keys. Both Redis clients implement it.
//
// Both return as soon as ctx ends, with ctx's error, whatever the client
// is still waiting for: a caller who gives up is never held by a stalled
// Redis.
type evaluator interface {
	// eval runs the script with keys and args and appends the reply's
	// integers to dst.
	eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error)
	// del deletes keys in one command.
	del(ctx context.Context, keys []string) error
}

// rueidisEval runs the script with EVALSHA, and EVAL when Redis answers
// NOSCRIPT, built here rather than by rueidis.Lua so that every command can
// take rueidis' pipeline path (see cancelOnly).
type rueidisEval struct {
	c      rueidis.Client
	script string
	sha    string
	chans  sync.Pool    // chan rueidis.RedisResult, capacity 1, empty
	calm   atomic.Int64 // commands in a row without a connection error, up to calmAfter
	ack    *replicaAck  // WithReplicaAck; nil: no WAIT
	direct *directConns // nil: every command is pipelined (Cluster)

	// The script as a function (WithFunctions; see library in script.go),
	// run with FCALL while Redis lets it, EVALSHA otherwise. On a Cluster
	// every node gets the library (see load).
	fn      string      // its name; "" when the script runs with EVALSHA only
	lib     string      // its library's code
	noFn    atomic.Bool // Redis has no functions, or this user may not use them
	loading atomic.Bool // a FUNCTION LOAD is in flight
}

// replicaAck is WAIT's arguments: the replicas that must have a call's
// writes, and how long to wait for them.
type replicaAck struct {
	replicas int64
	timeout  time.Duration
}

// calmAfter is how many commands in a row must go through without a
// connection error before do sends from the caller's goroutine. rueidis
// picks one of its few connections at random for each command, so by then
// every one of them has been dialed and proven.
const calmAfter = 256

// evalConfig is what a rueidisEval is built with: the Store's validated
// settings (config.evalConfig).
type evalConfig struct {
	ack       *replicaAck // WithReplicaAck; nil: no WAIT
	lanes     int         // WithBatchLanes: dedicated connections at most
	functions bool        // WithFunctions
}

func newRueidisEval(c rueidis.Client, script string, ec evalConfig) *rueidisEval {
	sum := sha1.Sum([]byte(script))
	e := &rueidisEval{c: c, script: script, sha: hex.EncodeToString(sum[:]), ack: ec.ack}
	if ec.functions {
		e.lib, e.fn, _ = library(script) // none when the script has no function
	}
	// A dedicated connection is bound to one node, and a Cluster's
	// commands go to the nodes of their keys; with WAIT, the script and
	// the WAIT share a pipelined round trip.
	if c.Mode() != rueidis.ClientModeCluster && e.ack == nil {
		e.direct = &directConns{c: c, max: int32(ec.lanes)}
	}
	return e
}

// cancelOnly is a context that ends when its parent does but reports no
// deadline. rueidis sends a command with a deadline and no other command in
// flight on a synchronous path that puts the deadline on the socket, and
// closes the connection when it passes, failing every other command on it.
// Without a deadline, and marked as a pipeline command (ToPipe), a command
// goes through the pipeline, which gives up on it when the context ends
// and keeps the connection; the deadline still ends the context.
type cancelOnly struct{ context.Context }

func (cancelOnly) Deadline() (time.Time, bool) { return time.Time{}, false }

// command is one command in parts, for the builder of the path do takes:
// head (the name and the arguments before the keys), keys, and args.
type command struct {
	head       [3]string
	nhead      int
	keys, args []string
}

// build builds c, marked blocking or as a pipeline command.
func (c *command) build(b rueidis.Builder, blocking bool) rueidis.Completed {
	a := b.Arbitrary(c.head[:c.nhead]...).Keys(c.keys...).Args(c.args...)
	if blocking {
		return a.Blocking()
	}
	return a.Build().ToPipe()
}

// do sends cmd and returns its result, or ctx's error as soon as ctx ends.
//
// On connections that are up, rueidis' pipeline gives up on a command when
// its context ends, so while things are calm do sends from the caller's
// goroutine. rueidis does not give up everywhere, though: a connection it
// (re)dials runs its handshake under the dial timeout (5s) whatever the
// context does, and callers queue behind it. So from the first connection
// error until calmAfter commands have gone through again, each command
// runs on a goroutine of its own that the caller leaves when ctx ends; the
// goroutine ends when rueidis returns, and its result is dropped.
//
// While calm, a command that finds one of the evaluator's dedicated
// connections idle goes out on it instead, written and read on the
// caller's goroutine (see directConns).
func (e *rueidisEval) do(ctx context.Context, cmd *command) rueidis.RedisResult {
	if e.ack != nil {
		return e.doAcked(ctx, cmd.build(e.c.B(), false))
	}
	if e.direct != nil && e.calm.Load() >= calmAfter && e.direct.take(ctx) {
		// Marked blocking, the command holds off rueidis' keep-alive PING
		// on its connection, and a cancellation closes the connection at
		// once (see directConns.do).
		res := e.direct.do(ctx, cmd.build(e.c.B(), true))
		e.note(res)
		return res
	}
	c := cmd.build(e.c.B(), false)
	return e.send(ctx, func(ctx context.Context) rueidis.RedisResult { return e.c.Do(ctx, c) })
}

// send runs fn, one round trip on the client, as do describes.
func (e *rueidisEval) send(ctx context.Context, fn func(context.Context) rueidis.RedisResult) rueidis.RedisResult {
	if e.calm.Load() >= calmAfter {
		res := fn(cancelOnly{ctx})
		e.note(res)
		return res
	}
	ch, _ := e.chans.Get().(chan rueidis.RedisResult)
	if ch == nil {
		ch = make(chan rueidis.RedisResult, 1)
	}
	go func() {
		res := fn(cancelOnly{ctx})
		e.note(res)
		ch <- res
	}()
	select {
	case res := <-ch:
		e.chans.Put(ch)
		return res
	case <-ctx.Done():
		return rueidis.NewErrorResult(ctx.Err()) // ch stays with the goroutine
	}
}

// doAcked sends cmd and then WAIT on the same connection in one round
// trip (a WAIT covers the writes made on its own connection), and returns
// cmd's result, or an error when fewer replicas than e.ack asks for have
// its writes. In a Cluster, rueidis sends a keyless command of a
// DoMulti to the node of the others.
func (e *rueidisEval) doAcked(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	wait := e.c.B().Wait().Numreplicas(e.ack.replicas).Timeout(e.ack.timeout.Milliseconds()).Build().ToPipe()
	var acked rueidis.RedisResult
	res := e.send(ctx, func(ctx context.Context) rueidis.RedisResult {
		rs := e.c.DoMulti(ctx, cmd, wait)
		acked = rs[1]
		return rs[0]
	})
	if res.Error() != nil {
		return res
	}
	n, err := acked.AsInt64()
	if err != nil {
		return rueidis.NewErrorResult(fmt.Errorf("WAIT: %w", err))
	}
	if n < e.ack.replicas {
		return rueidis.NewErrorResult(fmt.Errorf("WAIT: %d of %d replicas had the write within %v (it stays on the primary)", n, e.ack.replicas, e.ack.timeout))
	}
	return res
}

// note counts res toward calm, or ends the calm on a connection error (an
// error reply from Redis says nothing about the connection).
func (e *rueidisEval) note(res rueidis.RedisResult) {
	if res.NonRedisError() != nil {
		e.calm.Store(0)
	} else if e.calm.Load() < calmAfter {
		e.calm.Add(1)
	}
}

func (e *rueidisEval) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	res, ok := e.fcall(ctx, keys, args)
	if !ok {
		res = e.run(ctx, "EVALSHA", e.sha, keys, args)
		if err := res.Error(); err != nil && isNoScript(err) {
			res = e.run(ctx, "EVAL", e.script, keys, args)
		}
	}
	msgs, err := res.ToArray()
	if err != nil {
		return dst, err
	}
	for i := range msgs {
		v, err := msgs[i].AsInt64()
		if err != nil {
			return dst, err
		}
		dst = append(dst, v)
	}
	return dst, nil
}

// run runs EVALSHA or EVAL (verb) of script (its SHA-1 or source).
func (e *rueidisEval) run(ctx context.Context, verb, script string, keys, args []string) rueidis.RedisResult {
	return e.do(ctx, &command{head: [3]string{verb, script, strconv.Itoa(len(keys))}, nhead: 3, keys: keys, args: args})
}

// fcall runs the script's function, loading its library when Redis does
// not have it (yet, or any more: a restart, a FUNCTION FLUSH, a Cluster
// node added). ok is false when the call is to run with EVALSHA instead:
// the script has no function, Redis has no functions (before 7.0) or
// refuses them to this user (from then on), or the library could not be
// loaded now (another call is loading it, this Redis is a read-only
// replica, or the key's Cluster node did not take it).
func (e *rueidisEval) fcall(ctx context.Context, keys, args []string) (rueidis.RedisResult, bool) {
	if e.fn == "" || e.noFn.Load() {
		return rueidis.RedisResult{}, false
	}
	res := e.run(ctx, "FCALL", e.fn, keys, args)
	msg, isRedis := redisError(res.Error())
	switch {
	case !isRedis:
		return res, true
	case refusesFunctions(msg):
		e.noFn.Store(true)
		return res, false
	case !functionMissing(msg):
		return res, true // the function's own error
	case !e.loading.CompareAndSwap(false, true):
		return res, false
	}
	err := e.load(ctx)
	e.loading.Store(false)
	if msg, isRedis := redisError(err); isRedis {
		if refusesFunctions(msg) {
			e.noFn.Store(true)
		}
		return res, false
	} else if err != nil {
		return rueidis.NewErrorResult(err), true
	}
	res = e.run(ctx, "FCALL", e.fn, keys, args)
	if msg, _ := redisError(res.Error()); functionMissing(msg) {
		return res, false
	}
	return res, true
}

// load loads the library: on the Redis of a standalone or Sentinel
// client, on every node of a Cluster's. Redis having it already is no
// error. On a Cluster, a replica refusing the write, or a node that cannot
// be reached, is not one either: replicas get the library from their
// primaries, and a node without it answers its next FCALL with "Function
// not found" again; the first error of another kind is returned.
func (e *rueidisEval) load(ctx context.Context) error {
	cmd := &command{head: [3]string{"FUNCTION", "LOAD", e.lib}, nhead: 3}
	loaded := func(err error) error {
		if msg, _ := redisError(err); strings.Contains(msg, "already exists") {
			return nil
		}
		return err
	}
	if e.c.Mode() != rueidis.ClientModeCluster {
		return loaded(e.do(ctx, cmd).Error())
	}
	var first error
	for _, n := range e.c.Nodes() {
		err := loaded(n.Do(cancelOnly{ctx}, cmd.build(n.B(), false)).Error())
		msg, isRedis := redisError(err)
		if err != nil && isRedis && !strings.HasPrefix(msg, "READONLY") && first == nil {
			first = err
		}
	}
	return first
}

// functionMissing reports whether msg says that Redis has no such
// function (its library not loaded there).
func functionMissing(msg string) bool { return strings.Contains(msg, "Function not found") }

// redisError returns the message of err when it is an error reply.
func redisError(err error) (string, bool) {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return "", false
	}
	return re.Error(), true
}

// refusesFunctions reports whether msg says that Redis has no functions
// (an unknown command, before 7.0 or where a proxy or an operator left
// them out) or that this user may not use them (an ACL refusing FCALL or
// FUNCTION LOAD, not a key).
func refusesFunctions(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "unknown command") ||
		strings.HasPrefix(m, "noperm") && (strings.Contains(m, "'fcall'") || strings.Contains(m, "'function"))
}

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "NOSCRIPT")
}

func (e *rueidisEval) del(ctx context.Context, keys []string) error {
	return e.do(ctx, &command{head: [3]string{"DEL"}, nhead: 1, keys: keys}).Error()
}

type goRedisEval struct {
	c redis.UniversalClient
	s *redis.Script // Run: EVALSHA, EVAL on NOSCRIPT
}

func (e *goRedisEval) eval(ctx context.Context, keys, args []string, dst []int64) ([]int64, error) {
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	keys = detach(ctx, keys)
	var vals []int64
	err := prompt(ctx, func() (err error) {
		vals, err = e.s.Run(ctx, e.c, keys, a...).Int64Slice()
		return err
	})
	if err != nil {
		return dst, err
	}
	return append(dst, vals...), nil
}

func (e *goRedisEval) del(ctx context.Context, keys []string) error {
	keys = detach(ctx, keys)
	return prompt(ctx, func() error { return e.c.Del(ctx, keys...).Err() })
}

// detach copies keys, which the caller reuses once a call returns, when
// prompt may leave fn running after that.
func detach(ctx context.Context, keys []string) []string {
	if ctx.Done() == nil {
		return keys
	}
	return append([]string(nil), keys...)
}

// prompt runs fn, which only sees ctx's deadline (go-redis puts it on the
// socket and reads on through a cancellation), on its own goroutine when
// ctx can end (the Store's calls always can: see Store.bound), and returns
// ctx's error as soon as ctx ends. fn then
// finishes on its own within the deadline and its result is dropped; it
// must not write anything the caller reads after prompt returned early.
func prompt(ctx context.Context, fn func() error) error {
	if ctx.Done() == nil {
		return fn()
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// directConns lends a few connections of rueidis' dedicated pool (the one
// behind Client.Dedicate) to calm commands. On a dedicated connection that
// has only ever carried one command at a time, rueidis writes the command
// and reads its reply on the caller's goroutine, with the context's
// deadline on the socket; the pipeline instead hands every command to a
// writer goroutine and its reply back from a reader goroutine, and those
// two wake-ups cost a lone caller about as much as Redis' own work for a
// decision. The pipeline stays for everything beyond max commands at a
// time, where it shares round trips.
//
// A command never dials on its caller's goroutine (a dial ignores the
// context: see do): a goroutine makes each connection and proves it with
// a PING before it is lent, and a command takes one only while parked
// says that one of the evaluator's proven connections is idle in the pool.
// Connections go back to the pool after every command, so closing the
// client closes them.
//
// On a dedicated connection, a deadline that passes closes it (rueidis);
// so does a cancellation (see do). Either way it serves only the command
// that gave up, and the next command takes another.
//
// The pool is the client's, shared with its blocking commands (BLPOP and
// the like): one of those may take a connection parked here, and the
// command that counted on it then dials one on its own goroutine (Redis
// answered 256 commands in a row just before), or, with a
// BlockingPoolSize the application's blocking commands fill, waits for
// one of theirs to end.
type directConns struct {
	c   rueidis.Client
	max int32 // connections of the evaluator's at once

	parked atomic.Int32 // proven connections idle in the pool
	total  atomic.Int32 // parked + lent + being made, at most max
	sent   atomic.Int64 // commands sent on them (tests)
}

// take claims a parked connection for a command with ctx, which must have
// a deadline (rueidis puts it on the socket). When there is none it
// returns false and, while fewer than max exist, starts making one.
func (d *directConns) take(ctx context.Context) bool {
	if _, ok := ctx.Deadline(); !ok {
		return false
	}
	for {
		p := d.parked.Load()
		if p == 0 {
			break
		}
		if d.parked.CompareAndSwap(p, p-1) {
			return true
		}
	}
	for {
		t := d.total.Load()
		if t >= d.max {
			return false
		}
		if d.total.CompareAndSwap(t, t+1) {
			go d.make()
			return false
		}
	}
}

// makeTimeout bounds the PING that proves a new connection.
const makeTimeout = time.Second

// make dials a dedicated connection (Dedicate), proves it and parks it.
func (d *directConns) make() {
	dc, release := d.c.Dedicate()
	ctx, cancel := context.WithTimeout(context.Background(), makeTimeout)
	err := dc.Do(ctx, dc.B().Ping().Build()).Error()
	cancel()
	if err != nil {
		dc.Close()
		d.total.Add(-1)
		return
	}
	release()
	d.parked.Add(1)
}

// do sends cmd, a command marked blocking, on the connection take
// claimed. A cancellation of ctx before its deadline closes the
// connection, which ends rueidis' read at once: a connection with a
// blocking command in flight closes without first draining it with a
// PING, as it otherwise does (which a stalled Redis would hold up).
func (d *directConns) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	d.sent.Add(1)
	dc, release := d.c.Dedicate()
	var stop func() bool
	if src := cancelSource(ctx); src.Done() != nil {
		stop = context.AfterFunc(src, dc.Close)
	}
	res := dc.Do(ctx, cmd)
	if stop != nil && !stop() || res.NonRedisError() != nil {
		// Closed (the cancellation's dc.Close may still be running;
		// both are idempotent) or broken: the pool drops it.
		dc.Close()
		d.total.Add(-1)
		return res
	}
	release()
	d.parked.Add(1)
	return res
}

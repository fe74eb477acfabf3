// Package fallback keeps rate limiting up when the shared store is not: a
// ratewarden.Store decorator that gives every call to the primary store a
// deadline, stops calling it through a circuit breaker while it keeps
// failing, and answers meanwhile with a failure policy chosen up front.
//
//	primary, err := redisstore.New(client)
//	if err != nil {
//		return err
//	}
//	st, err := fallback.New(primary,
//		fallback.WithPolicy(fallback.LocalFallback),
//		fallback.WithReplicas(4)) // this service runs 4 replicas
//	if err != nil {
//		return err
//	}
//	lim, err := ratewarden.New(st)
//
// FailOpen allows, FailClosed denies with a RetryAfter, LocalFallback
// decides on an in-process store holding this replica's share of each limit
// (Rate/replicas per Period, rounded down, at least 1), so that the
// replicas together admit at most the limit during an outage. A policy's
// Result names it in its Source (Result.Degraded reports true) and comes
// with a nil error: an outage is an answer, not a failure.
//
// Each call to the primary runs under WithTimeout (default 50ms; an
// earlier deadline of the caller wins, and then a timeout is the
// caller's). The breaker (github.com/sony/gobreaker/v2) counts round
// trips, not calls: of the calls in flight together, which one stalled
// pipeline or batched script call fails at once, only the first to finish
// counts. It opens after WithTripAfter round trips in a row failed (5) or
// when at least half of 20 or more in the WithWindow (10s) did, calls
// nothing while open, and lets a probe through after WithProbeInterval:
// decisions come from the primary again within 2 × the probe interval +
// the timeout of its recovery. Every state change is logged (WithLogger)
// and reported (WithOnStateChange); State backs readiness checks.
//
// A failure is an error wrapping ratewarden.ErrStoreUnavailable or no
// ratewarden sentinel at all. The primary's bad-input errors and the end of
// the caller's context are returned as errors and never count; answers the
// primary gives without its backend (Source cache or lease) count neither
// way. A key whose stored state is unusable (ratewarden.ErrKeyState) is
// that key's trouble: it is answered by the policy, counted as the
// primary's success, and logged once per 10s without the key. Reset is no
// decision: during an outage it returns an error wrapping
// ratewarden.ErrStoreUnavailable.
//
// What LocalFallback admitted during an outage is written back to the
// primary (Store.Charge) once the breaker closes, and the keys concerned stay on their local share for a grace
// (WithGrace, 5s) while every replica writes its part back: a window open
// across the outage counts both.
//
// Charges and concurrency limits go through the same deadline, breaker
// and policy, so that Limiter.Wait, Limiter.Reserve and Limiter.Acquire
// keep working through an outage. A reservation (Request.MaxDelay) is answered by the policy as
// any check: LocalFallback paces waiters by this replica's share. A
// settlement (Charge) the primary cannot take goes to the local share and
// into the write-back journal, signed and in order, so the primary gets
// it when it returns (Store.Charge). A concurrency limit (Acquire) goes to
// the primary under the same deadline and breaker; during an outage
// FailOpen grants a permit held nowhere, FailClosed refuses, and
// LocalFallback holds this replica's share of the permits (max/replicas,
// at least 1) in the local store, where Release and Extend find them.
//
// NewPartitioned keeps one breaker per part of the key space (a Redis
// Cluster's slot groups). Like every ratewarden.Store these assume valid
// input, which the ratewarden.Limiter in front of them ensures; package
// stack assembles the recommended stack with this package on top.
// docs/failure.md has the rest: the local share's accuracy, the latency and
// recovery bounds, and runs against a real Redis killed, black-holed, slowed.
package fallback

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/internal/mono"
	"github.com/ratewarden/ratewarden/internal/nilcheck"
	"github.com/ratewarden/ratewarden/memstore"
	"github.com/sony/gobreaker/v2"
)

// ErrOpen is the cause of degraded decisions, and the error of Reset, while
// the breaker does not let calls through (open, or half-open with all its
// probes in flight). It wraps ratewarden.ErrStoreUnavailable.
var ErrOpen = fmt.Errorf("fallback: circuit breaker open: %w", ratewarden.ErrStoreUnavailable)

// Store is a ratewarden.Store that decides on a primary store and, when the
// primary cannot, by a failure policy. Make one with New; the zero Store is
// not usable. It is safe for concurrent use.
type Store struct {
	primary ratewarden.Store
	local   ratewarden.Store // nil when no limit can get LocalFallback
	cfg     config
	cb      *gobreaker.CircuitBreaker[struct{}]

	openedAt atomic.Int64 // time.Time.UnixNano of the last change to open
	events   events

	clock      mono.Clock // the instants (ns) of the journal, the log and the grace
	rounds     rounds
	keyStates  keyStates
	journal    journal // what the primary missed, to write back
	reconciled atomic.Int64
	pins       pins
	writer     writer
	scratch    sync.Pool // *scratch for degraded decisions
}

// New returns a Store deciding on primary, configured by opts.
func New(primary ratewarden.Store, opts ...Option) (*Store, error) {
	if nilcheck.Is(primary) {
		return nil, fmt.Errorf("fallback: primary store must not be nil%s: %w", nilcheck.Describe(primary), ratewarden.ErrInvalidConfig)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{primary: primary, cfg: cfg, local: cfg.local, clock: mono.New()}
	if cfg.reconcileKeys > 0 {
		s.journal.init(cfg.reconcileKeys)
	}
	if s.local == nil && (cfg.policy == LocalFallback || cfg.policyFor != nil) {
		m, err := memstore.New()
		if err != nil {
			return nil, fmt.Errorf("fallback: local store: %w", err)
		}
		s.local = m
	}
	s.scratch.New = func() any { return new(scratch) }
	s.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:          cfg.name,
		MaxRequests:   uint32(cfg.probes), // validated to fit
		Interval:      cfg.window,
		BucketPeriod:  cfg.window / 10,
		Timeout:       cfg.probeInterval,
		ReadyToTrip:   s.readyToTrip,
		OnStateChange: s.stateChanged,
		IsExcluded:    func(err error) bool { return err == errUncounted || isPass(err) },
	})
	return s, nil
}

func (s *Store) readyToTrip(c gobreaker.Counts) bool {
	if uint64(c.ConsecutiveFailures) >= uint64(s.cfg.tripAfter) {
		return true
	}
	done := uint64(c.TotalSuccesses) + uint64(c.TotalFailures)
	return done >= uint64(s.cfg.tripMin) && float64(c.TotalFailures) >= s.cfg.tripRatio*float64(done)
}

// State returns the breaker's state now. A readiness check can report not
// ready while it is StateOpen, when decisions are degraded.
func (s *Store) State() State {
	st := toState(s.cb.State()) // may move open to half-open
	s.events.flush(s)
	return st
}

func toState(st gobreaker.State) State {
	switch st {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	default:
		return StateClosed
	}
}

// passError carries an error that is the caller's business, not the
// backend's: bad input, or the caller's context ending. The breaker
// excludes it from its counts and Check returns err unchanged.
type passError struct{ err error }

func (e *passError) Error() string {
	if e.err == nil {
		return "fallback: answered without the backend"
	}
	return e.err.Error()
}

// errLocal marks a check the primary answered without its backend (from a
// deny cache or a lease): it says nothing about the backend's health, so
// the breaker counts it neither way, and Check returns the answer.
var errLocal = &passError{}

// answeredLocally reports whether every result came from a local cache or
// lease inside the primary.
func answeredLocally(res []ratewarden.Result) bool {
	for _, r := range res {
		if r.Source != ratewarden.SourceCache && r.Source != ratewarden.SourceLease {
			return false
		}
	}
	return len(res) > 0
}

// errPinned marks a call that found its key pinned (see pins) once the
// breaker had let it through: the breaker closed, and pinned the key,
// between the caller's first look and its call. It is no outcome of the
// primary's; the key is answered on its local share, as a pinned key is.
var errPinned = &passError{err: ErrRecovering}

func isPass(err error) bool {
	var p *passError
	return errors.As(err, &p)
}

// keyStateError carries the primary's ratewarden.ErrKeyState: this key's
// stored state is unusable, the primary is fine. The breaker counts the
// call as a success (the primary answered); Check answers the key by the
// failure policy.
type keyStateError struct{ err error }

func (e *keyStateError) Error() string { return e.err.Error() }

// errUncounted marks an outcome the breaker leaves out because another call
// of the same round trip already spoke for it (see rounds).
var errUncounted = errors.New("fallback: outcome counted with its round trip")

// judge turns the primary's answer to a call that started at start into
// what it means here: nil; errLocal; a *passError (bad input, or the
// caller's own end: see callersFault); a *keyStateError; or the cause of
// a failure, wrapping ratewarden.ErrStoreUnavailable.
func (s *Store) judge(ctx context.Context, start time.Time, err error) error {
	if err == nil || err == errLocal || err == errPinned {
		return err
	}
	switch ratewarden.Classify(context.Background(), err) { // the caller's context is looked at below
	case ratewarden.InvalidInput:
		return &passError{err}
	case ratewarden.KeyState:
		return &keyStateError{err}
	}
	if s.callersFault(ctx, start) {
		return &passError{callerGone(ctx)}
	}
	if errors.Is(err, ratewarden.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("fallback: primary: %w: %w", err, ratewarden.ErrStoreUnavailable) // a backend error that follows no convention
}

// callersFault reports whether a call that started at start and failed
// ended because of its caller: the caller canceled, or the caller's
// deadline came no later than the call's own (start + WithTimeout) and has
// passed. The earlier deadline owns a timeout, so a caller deadline later
// than the store's leaves a timeout the store's, whatever the clock says
// by the time it is looked at.
func (s *Store) callersFault(ctx context.Context, start time.Time) bool {
	if ctx.Err() == context.Canceled {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !d.After(start.Add(s.cfg.timeout)) && !time.Now().Before(d)
}

func callerGone(ctx context.Context) error {
	cause := context.Cause(ctx)
	if cause == nil {
		cause = context.DeadlineExceeded // the deadline passed; ctx's timer has yet to fire
	}
	return fmt.Errorf("fallback: caller gave up: %w: %w", cause, ratewarden.ErrStoreUnavailable)
}

// call runs fn on the primary through the breaker, under the deadline. It
// returns what judge made of fn's answer, or ErrOpen when the breaker did
// not let the call through.
func (s *Store) call(ctx context.Context, fn func(context.Context) error) error {
	start, round := time.Now(), s.rounds.begin()
	var out error
	_, err := s.cb.Execute(func() (struct{}, error) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
		defer cancel()
		out = s.judge(ctx, start, fn(cctx))
		return struct{}{}, s.count(round, out)
	})
	s.events.flush(s)
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return ErrOpen
	}
	return out
}

// ask runs fn on the primary through call and sorts what came of it, as
// every operation that a policy may answer needs it: both nil when the
// primary's answer stands; err, the caller's own (bad input, the end of
// the caller's context), to return as it is; or cause, why the primary did
// not answer (a failure, ErrOpen, or the key's unusable state, which
// KeyStateErrors counts), for the policy to answer instead.
func (s *Store) ask(ctx context.Context, fn func(context.Context) error) (cause, err error) {
	out := s.call(ctx, fn)
	switch e := out.(type) {
	case nil:
		return nil, nil
	case *passError:
		if e == errPinned {
			return ErrRecovering, nil
		}
		return nil, e.err // nil for errLocal: the primary's local answer stands
	case *keyStateError:
		s.keyStates.note(s)
		return e.err, nil
	}
	return out, nil
}

// count is what the breaker is told of out, the judged outcome of a call
// that began round: caller's business and local answers are left out; a
// success, a key's bad state (the primary answered) and a failure count
// once per round trip (rounds).
func (s *Store) count(round uint64, out error) error {
	var ks *keyStateError
	switch {
	case isPass(out):
		return out
	case errors.As(out, &ks):
		out = nil
	}
	if !s.rounds.first(round) {
		return errUncounted
	}
	return out
}

// Check implements ratewarden.Store. It asks the primary under the
// deadline and the breaker and, when the primary cannot decide, fills res
// by the failure policy with a nil error. See the package doc for which
// errors remain.
//
// req must be valid and res must have len(req.Limits) elements, as a
// ratewarden.Limiter guarantees (see ratewarden.Request); Check does not
// validate them again. Bad input stops at the Limiter, before any state
// here or in the primary is touched.
func (s *Store) Check(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result) error {
	if ctx.Err() != nil {
		return callerGone(ctx)
	}
	if s.pinned(req.Key) {
		return s.degrade(ctx, req, res, ErrRecovering)
	}
	cause, err := s.ask(ctx, func(cctx context.Context) error {
		if s.pinned(req.Key) {
			return errPinned
		}
		if err := s.primary.Check(cctx, req, res); err != nil {
			return err
		}
		if answeredLocally(res) {
			return errLocal
		}
		return nil
	})
	if cause == nil {
		return err
	}
	return s.degrade(ctx, req, res, cause)
}

// Reset implements ratewarden.Store: it resets key under limits on the
// primary (under the deadline and the breaker) and in the local shares.
// While the primary is unavailable it returns an error wrapping
// ratewarden.ErrStoreUnavailable (ErrOpen when the breaker is open): the
// shared state could not be reset.
//
// key and limits must be valid, as a ratewarden.Limiter guarantees; Reset
// does not validate them again.
func (s *Store) Reset(ctx context.Context, key string, limits ...ratewarden.Limit) error {
	if ctx.Err() != nil {
		return callerGone(ctx)
	}
	if s.local != nil {
		shares := make([]ratewarden.Limit, len(limits))
		for i, l := range limits {
			shares[i] = share(l, int64(s.cfg.replicas))
		}
		if err := s.local.Reset(ctx, localKey(key), shares...); err != nil {
			return fmt.Errorf("fallback: reset local share: %w", err)
		}
	}
	// The error is already one of this package's (ErrOpen, a primary's
	// unconventional error wrapped) or the primary's own: no second prefix.
	s.journal.forget(key)
	err := s.call(ctx, func(cctx context.Context) error { return s.primary.Reset(cctx, key, limits...) })
	switch e := err.(type) {
	case *passError:
		return e.err
	case *keyStateError:
		return e.err
	}
	return err
}

// policyOf returns the policy for l.
func (s *Store) policyOf(l ratewarden.Limit) Policy {
	if s.cfg.policyFor != nil {
		if p := s.cfg.policyFor(l); p.valid() {
			return p
		}
	}
	return s.cfg.policy
}

// share is this replica's part of l: Rate (and a TokenBucket's Burst)
// divided by replicas, rounded down, at least 1. Rounding Rate up to 1 can
// stretch a bucket's refill time (Burst × Period / Rate) past MaxPeriod;
// the share's Burst is then capped so the share stays a valid limit.
func share(l ratewarden.Limit, replicas int64) ratewarden.Limit {
	if replicas <= 1 {
		return l
	}
	l.Rate = max(l.Rate/replicas, 1)
	if l.Burst > 0 {
		l.Burst = max(l.Burst/replicas, 1)
		// The share's refill time Burst × Period / Rate must stay within
		// MaxPeriod, as Validate requires; the products need 128 bits.
		hi, lo := bits.Mul64(uint64(l.Burst), uint64(l.Period))
		mhi, mlo := bits.Mul64(uint64(l.Rate), uint64(ratewarden.MaxPeriod))
		if hi > mhi || (hi == mhi && lo > mlo) {
			maxBurst, _ := bits.Div64(mhi, mlo, uint64(l.Period)) // < Burst: fits
			l.Burst = max(int64(maxBurst), 1)
		}
	}
	return l
}

// scratch holds the local request of one degraded check, pooled so an
// outage does not allocate per check.
type scratch struct {
	idx    []int
	limits []ratewarden.Limit
	res    []ratewarden.Result
	req    ratewarden.Request
}

// degrade fills res by the failure policy of each limit. cause is why the
// primary did not decide.
func (s *Store) degrade(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result, cause error) error {
	sc := s.scratch.Get().(*scratch)
	defer func() {
		clear(sc.limits)
		clear(sc.res)
		sc.idx, sc.limits, sc.res, sc.req = sc.idx[:0], sc.limits[:0], sc.res[:0], ratewarden.Request{}
		s.scratch.Put(sc)
	}()

	closed := false
	for i, l := range req.Limits {
		p := s.policyOf(l)
		if cause == ErrRecovering {
			p = LocalFallback // only LocalFallback admissions are journaled and pinned
		}
		switch p {
		case FailOpen:
			rem := l.Capacity()
			if !req.Peek {
				rem -= req.Cost
			}
			res[i] = ratewarden.Result{Allowed: true, Limit: l, Remaining: rem, Source: ratewarden.SourceFailOpen}
		case FailClosed:
			ra := s.retryAfter()
			res[i] = ratewarden.Result{Limit: l, RetryAfter: ra, ResetAfter: ra, Source: ratewarden.SourceFailClosed}
			closed = true
		default:
			sc.idx = append(sc.idx, i)
			sc.limits = append(sc.limits, share(l, int64(s.cfg.replicas)))
		}
	}
	if len(sc.idx) > 0 {
		if err := s.decideLocal(ctx, req, res, sc, closed, !errors.Is(cause, ratewarden.ErrKeyState)); err != nil {
			return err
		}
	}
	if s.cfg.onDegraded != nil {
		for i := range res {
			s.cfg.onDegraded(policyOfSource(res[i].Source), cause)
		}
	}
	return nil
}

// maxLocalKey is the longest key the local share stores as it is; longer
// keys are stored by their SHA-256. A key the primary accepts is then never
// refused by the local share's key cap (memstore.DefaultMaxKeyBytes), and
// the share's memory stays bounded by its entries whatever the keys' length.
const maxLocalKey = 256

// localKey is key as the local share stores it. The hashed form starts
// with a NUL byte, so it cannot be mistaken for a short key written as is.
func localKey(key string) string {
	if len(key) <= maxLocalKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "\x00sha256:" + hex.EncodeToString(sum[:])
}

// decideLocal decides the LocalFallback limits of req (sc.idx, sc.limits)
// on the local store. It only peeks when another limit already denied
// (closed) or when the cost exceeds a share's capacity: then the request
// is denied and must consume nothing.
//
// With record set (an outage, not a key's bad state), an admission is
// journaled to be written back to the primary when it returns.
func (s *Store) decideLocal(ctx context.Context, req *ratewarden.Request, res []ratewarden.Result, sc *scratch, closed, record bool) error {
	tooBig := false
	for _, l := range sc.limits {
		tooBig = tooBig || req.Cost > l.Capacity()
	}
	sc.req = ratewarden.Request{
		Key: localKey(req.Key), Limits: sc.limits, Cost: req.Cost, Peek: req.Peek || closed,
		MaxDelay: req.MaxDelay, Refundable: req.Refundable, // a reservation is paced by this replica's share
	}
	if tooBig {
		// Cannot pass locally during this outage at all; report the state.
		sc.req.Cost, sc.req.Peek = 0, true
	}
	if n := len(sc.limits); cap(sc.res) < n {
		sc.res = make([]ratewarden.Result, n)
	} else {
		sc.res = sc.res[:n]
	}
	if err := s.local.Check(ctx, &sc.req, sc.res); err != nil {
		return fmt.Errorf("fallback: local fallback: %w", err)
	}
	for j, i := range sc.idx {
		r := sc.res[j]
		if req.Cost > sc.limits[j].Capacity() {
			// More than the whole local share: denied until the primary is
			// back; a Period is the earliest a retry is worth it.
			r.Allowed, r.RetryAfter = false, sc.limits[j].Period
		}
		r.Source = ratewarden.SourceLocalFallback
		res[i] = r
	}
	if record && !sc.req.Peek && sc.req.Cost > 0 && s.journal.on() {
		s.recordLocal(req, sc)
	}
	return nil
}

func policyOfSource(src ratewarden.Source) Policy {
	switch src {
	case ratewarden.SourceFailOpen:
		return FailOpen
	case ratewarden.SourceFailClosed:
		return FailClosed
	default:
		return LocalFallback
	}
}

// retryAfter is the RetryAfter of a FailClosed denial: the configured one,
// else the time until the breaker's next probe, else (not open) the probe
// interval.
func (s *Store) retryAfter() time.Duration {
	if s.cfg.retryAfter > 0 {
		return s.cfg.retryAfter
	}
	if opened := s.openedAt.Load(); opened != 0 {
		left := time.Until(time.Unix(0, opened).Add(s.cfg.probeInterval))
		if left > 0 {
			return max(left, time.Millisecond)
		}
	}
	return s.cfg.probeInterval
}

// transition is one breaker state change, queued until it can be reported
// outside the breaker's lock.
type transition struct {
	from, to State
	at       time.Time
}

// events queues transitions from gobreaker's OnStateChange, which runs under
// the breaker's lock, and reports them from the next call that finds one
// queued: in order, one reporter at a time, and never under the lock, so a
// hook may call State.
type events struct {
	n          atomic.Int32 // len(pending), read without the lock
	mu         sync.Mutex
	pending    []transition
	delivering bool
}

func (s *Store) stateChanged(_ string, from, to gobreaker.State) {
	now := time.Now()
	if to == gobreaker.StateOpen {
		s.openedAt.Store(now.UnixNano())
	} else if from == gobreaker.StateOpen {
		s.openedAt.Store(0)
	}
	if to == gobreaker.StateClosed {
		// Pin the journaled keys with the change itself: a check that
		// finds the breaker closed must find them pinned, or the primary
		// decides them before it has the outage's admissions. Nothing here
		// calls the breaker; the writer runs on its own goroutine.
		s.startReconcile()
	}
	e := &s.events
	e.mu.Lock()
	e.pending = append(e.pending, transition{toState(from), toState(to), now})
	e.n.Store(int32(len(e.pending)))
	e.mu.Unlock()
}

func (e *events) flush(s *Store) {
	if e.n.Load() == 0 {
		return
	}
	e.mu.Lock()
	if e.delivering {
		e.mu.Unlock()
		return // the reporter in charge will take what was queued
	}
	e.delivering = true
	for len(e.pending) > 0 {
		batch := e.pending
		e.pending = nil
		e.n.Store(0)
		e.mu.Unlock()
		for _, t := range batch {
			s.report(t)
		}
		e.mu.Lock()
	}
	e.delivering = false
	e.mu.Unlock()
}

func (s *Store) report(t transition) {
	level, msg := slog.LevelInfo, "fallback: circuit breaker "+t.to.String()
	switch {
	case t.to == StateOpen:
		level = slog.LevelWarn
		msg += fmt.Sprintf("; primary store unavailable, answering with %s for %v before probing", s.cfg.policy, s.cfg.probeInterval)
	case t.to == StateHalfOpen:
		msg += "; probing the primary store"
	case t.to == StateClosed:
		msg += "; primary store deciding again"
	}
	s.cfg.logger.LogAttrs(context.Background(), level, msg,
		slog.String("store", s.cfg.name),
		slog.String("from", t.from.String()),
		slog.String("to", t.to.String()),
		slog.String("policy", s.cfg.policy.String()),
		slog.Time("at", t.at))
	if s.cfg.onState != nil {
		s.cfg.onState(t.from, t.to)
	}
}

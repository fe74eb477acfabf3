package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/config"
)

// unit is one store call: Cost units against every one of Limits for one
// key, decided atomically by the store.
type unit struct {
	req    ratewarden.Request
	res    []ratewarden.Result
	fp     config.FailurePolicy
	shadow bool // every limit of the unit is in shadow mode
	// impossible: the cost exceeds a limit's capacity, so the unit can
	// never be admitted; it is only peeked (cost 0) to report the state.
	impossible bool
}

func (u *unit) allowed() bool {
	for _, r := range u.res {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// errStore marks a store failure (503 / UNAVAILABLE), as opposed to bad
// input (400 / INVALID_ARGUMENT).
type errStore struct{ err error }

func (e *errStore) Error() string { return e.err.Error() }
func (e *errStore) Unwrap() error { return e.err }

// errCanceled marks a store call cut short because the caller gave up
// (its context was canceled or its deadline passed): not the store's
// failure, so it is neither counted as a store error nor logged as one.
type errCanceled struct{ err error }

func (e *errCanceled) Error() string { return "request canceled: " + e.err.Error() }
func (e *errCanceled) Unwrap() error { return e.err }

// storeFailure classifies the error of a store call made with ctx.
func storeFailure(ctx context.Context, err error) error {
	switch {
	case isInput(err):
		return err
	case ctx.Err() != nil:
		return &errCanceled{ctx.Err()}
	default:
		return &errStore{err}
	}
}

// decide runs units as one decision.
//
// One unit (every limit on one key) is one atomic store call. Several
// units (different keys) cannot be atomic across keys, so decide first
// peeks at every unit and, when any non-shadow unit would be denied,
// stops there: nothing is consumed anywhere. Otherwise it consumes every
// unit in turn. A race with another request between the peek and the
// consume can still deny a later unit after earlier ones consumed: best
// effort across keys, exact per key.
//
// denied says the request is denied whatever the units say (a limit of 0
// applies): the units are only peeked, to report their state.
func (s *Server) decide(ctx context.Context, units []*unit, denied bool) error {
	if len(units) == 1 && !denied {
		return s.run(ctx, units[0], false)
	}
	for _, u := range units {
		if err := s.run(ctx, u, true); err != nil {
			return err
		}
	}
	if denied {
		return nil
	}
	for _, u := range units {
		if !u.shadow && !u.allowed() {
			return nil // denied: the peeks are the answer; nothing consumed
		}
	}
	for _, u := range units {
		if err := s.run(ctx, u, false); err != nil {
			return err
		}
	}
	return nil
}

// run makes the store call of u.
func (s *Server) run(ctx context.Context, u *unit, peek bool) error {
	if u.res == nil {
		u.res = make([]ratewarden.Result, len(u.req.Limits))
	}
	req := u.req
	req.Peek = peek
	if u.impossible {
		req.Cost, req.Peek = 0, true
	}
	op := "check"
	if req.Peek {
		op = "peek"
	}
	if err := ratewarden.ValidateRequest(&req); err != nil {
		return err
	}
	st, err := s.backend.Store(u.fp)
	if err != nil {
		return &errStore{fmt.Errorf("store for %s: %w", u.fp, err)}
	}
	start := time.Now()
	err = st.Check(ctx, &req, u.res)
	s.m.storeDur.WithLabelValues(op, string(u.fp)).Observe(time.Since(start).Seconds())
	if err != nil {
		err = storeFailure(ctx, err)
		if _, ok := err.(*errStore); ok {
			s.m.storeErrs.WithLabelValues(op, string(u.fp)).Inc()
		}
		return err
	}
	if u.impossible {
		for i := range u.res {
			u.res[i].Allowed = false
		}
	}
	return nil
}

// reset clears key under limit.
func (s *Server) reset(ctx context.Context, fp config.FailurePolicy, key string, limit ratewarden.Limit) error {
	st, err := s.backend.Store(fp)
	if err != nil {
		return &errStore{fmt.Errorf("store for %s: %w", fp, err)}
	}
	start := time.Now()
	err = st.Reset(ctx, key, limit)
	s.m.storeDur.WithLabelValues("reset", string(fp)).Observe(time.Since(start).Seconds())
	if err != nil {
		err = storeFailure(ctx, err)
		if _, ok := err.(*errStore); ok {
			s.m.storeErrs.WithLabelValues("reset", string(fp)).Inc()
		}
		return err
	}
	return nil
}

func isInput(err error) bool {
	return errors.Is(err, ratewarden.ErrInvalidKey) || errors.Is(err, ratewarden.ErrInvalidLimit) || errors.Is(err, ratewarden.ErrInvalidCost)
}

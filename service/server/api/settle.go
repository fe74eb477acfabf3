package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/fallback"
	"github.com/ratewarden/ratewarden/service/server/decide"
)

// ReserveRequest is the body of POST /v1/reserve.
type ReserveRequest struct {
	Key string `json:"key"`
	// Policy names a rate policy of the config; or give Limit (inline
	// limits, when the operator turned them on).
	Policy string `json:"policy,omitempty"`
	Limit  string `json:"limit,omitempty"`
	// Estimate is the number of units admitted now, to be settled with the
	// actual number once it is known; required.
	Estimate *int64 `json:"estimate"`
}

// SettleRequest is the body of POST /v1/settle.
type SettleRequest struct {
	// Reservation is the token /v1/reserve answered with.
	Reservation string `json:"reservation"`
	// Actual is the actual cost, 0 (the work did not happen: everything
	// is given back) or more; required.
	Actual *int64 `json:"actual"`
}

// Reservation is the body of /v1/reserve's 200 answer: the decision, as
// /v1/check answers it (Cost is the estimate), and the reservation to
// settle.
type Reservation struct {
	Decision
	// Reservation is what /v1/settle takes: signed, so that it settles
	// nothing but this reservation; settle it on any replica that shares
	// the secret.
	Reservation string `json:"reservation"`
	// SettleWithinMS is how long the reservation can be settled: after
	// that the units it counted have stopped counting anyway, and
	// /v1/settle refuses it.
	SettleWithinMS int64 `json:"settle_within_ms"`
}

// Settlement is the body of /v1/settle's 200 answer.
type Settlement struct {
	Key      string `json:"key"`
	Policy   string `json:"policy,omitempty"`
	Limit    string `json:"limit"`
	Estimate int64  `json:"estimate"`
	Actual   int64  `json:"actual"`
	// Delta is actual − estimate: the units charged (> 0) or given back
	// (< 0).
	Delta int64 `json:"delta"`
	// Applied holds, per limit, the units that took effect: Delta while
	// the window the reservation counted in still counts, less (0, say)
	// where it has gone by; 0 when the reservation consumed nothing
	// (denied, or admitted by fail_open).
	Applied []int64 `json:"applied"`
}

// processSecret is a random secret for a Service given none.
func processSecret() [][]byte {
	s := make([]byte, 32)
	_, _ = rand.Read(s) // never fails (crypto/rand)
	return [][]byte{s}
}

// settleWindow is how long a reservation of lim can be settled: two
// periods (a sliding window's count weighs on the next one), and for a
// token bucket at least the time it takes to refill, after which nothing
// it counted counts any more; at most MaxPeriod.
func settleWindow(lim ratewarden.Limit) time.Duration {
	d := 2 * lim.Period
	if lim.Algorithm == ratewarden.TokenBucket {
		refill := float64(lim.Capacity()) * float64(lim.Period) / float64(lim.Rate)
		d = max(d, time.Duration(min(refill, float64(ratewarden.MaxPeriod))))
	}
	return min(d, ratewarden.MaxPeriod)
}

// handleReserve answers POST /v1/reserve: Limiter.Reserve of the estimate,
// answered as /v1/check answers, with a signed reservation.
func (s *Service) handleReserve(w http.ResponseWriter, r *http.Request) {
	var in ReserveRequest
	if e := decodeBody(r, &in); e != nil {
		s.writeProblem(w, e)
		return
	}
	if in.Estimate == nil {
		s.writeProblem(w, newProblem(probInvalid, `field "estimate" (the units to admit now, settled later with the actual cost) is required`))
		return
	}
	est := *in.Estimate
	t, e := s.resolve(in.Key, in.Policy, in.Limit, est)
	if e != nil {
		s.writeProblem(w, e)
		return
	}
	lim, err := s.lims.For(t.fp)
	var rv *ratewarden.Reservation
	if err == nil {
		rv, err = lim.Reserve(r.Context(), t.key, est, t.limit)
	}
	if err != nil {
		s.writeError(w, r, err, in.Key)
		return
	}
	res := rv.Results[0]
	tok := reservationToken{id: newID(), admitted: rv.Admitted(), estimate: est, policy: in.Policy, key: in.Key, results: rv.Results}
	t.series.Decision(s.m, &res, t.shadow)
	d := Reservation{
		Decision:       t.answer(w.Header(), in.Key, in.Policy, est, &res),
		Reservation:    tok.seal(s.secrets[0]),
		SettleWithinMS: ceilMillis(settleWindow(t.limit)),
	}
	writeJSON(w, http.StatusOK, &d)
}

// handleSettle answers POST /v1/settle: the reservation rebuilt from its
// token (Limiter.ReservationOf) and settled (Reservation.Settle: actual −
// estimate units charged or given back in one store call, dated when the
// reservation was admitted).
//
// A reservation settles once: before settling, the server takes the one
// permit of a key named after the reservation's id (a concurrency limit
// of 1 in the shared store, so every replica sees it) for as long as the
// reservation can be settled; a second settlement finds it taken and is
// a 409.
func (s *Service) handleSettle(w http.ResponseWriter, r *http.Request) {
	var in SettleRequest
	if e := decodeBody(r, &in); e != nil {
		s.writeProblem(w, e)
		return
	}
	tok, left, e := s.openSettle(&in)
	if e != nil {
		s.writeProblem(w, e)
		return
	}
	actual := *in.Actual
	d := tok.decision()
	out := Settlement{Key: tok.key, Policy: tok.policy, Limit: tok.limits(), Estimate: tok.estimate, Actual: actual, Delta: actual - tok.estimate, Applied: make([]int64, len(d.Results))}
	label := tok.policy
	if label == "" {
		label = "inline"
	}
	if !counted(d) {
		s.m.Settles.WithLabelValues(label, "uncounted").Inc()
		writeJSON(w, http.StatusOK, &out)
		return
	}
	lim, err := s.lims.For(s.reservationFailure(tok.policy))
	var rv *ratewarden.Reservation
	if err == nil {
		// Settle dates the charge from admitted, an instant of the issuing
		// replica's clock read on this one's: their skew moves the date by
		// as much, and one that puts it ahead of now makes it now (a
		// charge dated ahead would be taken as a token bucket's refund of
		// a slot not yet reached).
		admitted := tok.admitted
		if now := time.Now(); admitted.After(now) {
			admitted = now
		}
		rv, err = lim.ReservationOf(reservationKey(tok.policy, tok.key), tok.estimate, admitted, d)
	}
	if err == nil {
		err = s.settleOnce(r, lim, tok.id, left)
	}
	var st ratewarden.Settlement
	if err == nil {
		st, err = rv.Settle(r.Context(), actual)
	}
	switch {
	case errors.Is(err, errSettledBefore):
		s.m.Settles.WithLabelValues(label, "refused").Inc()
		s.writeProblem(w, newProblem(probSettled, "this reservation was settled before; a reservation settles once"))
		return
	case err != nil:
		s.writeError(w, r, err, tok.key)
		return
	}
	if st.Applied != nil {
		out.Applied = st.Applied
	}
	s.countSettlement(label, out.Delta, out.Applied[0])
	writeJSON(w, http.StatusOK, &out)
}

// counted reports whether a reservation's admission consumed anything:
// it was admitted, and not by fail_open alone, which counts nowhere. A
// reservation that consumed nothing settles to nothing, with no record.
func counted(d ratewarden.Decision) bool {
	return d.Allowed && slices.ContainsFunc(d.Results, func(r ratewarden.Result) bool { return r.Source != ratewarden.SourceFailOpen })
}

// openSettle checks a settlement's fields and reservation: the token and
// the time left to settle it.
func (s *Service) openSettle(in *SettleRequest) (reservationToken, time.Duration, *apiError) {
	switch {
	case in.Reservation == "":
		return reservationToken{}, 0, newProblem(probInvalid, `field "reservation" is required`)
	case in.Actual == nil:
		return reservationToken{}, 0, newProblem(probInvalid, `field "actual" (the actual cost, 0 or more) is required`)
	case *in.Actual < 0 || *in.Actual > ratewarden.MaxRate:
		return reservationToken{}, 0, newProblem(probInvalid, fmt.Sprintf(`field "actual" must be between 0 and %d, got %d`, int64(ratewarden.MaxRate), *in.Actual))
	}
	tok, err := openReservation(in.Reservation, s.secrets)
	if err != nil {
		return reservationToken{}, 0, newProblem(probInvalid, `field "reservation": not a reservation of this service (altered, or signed with a secret this replica does not hold)`)
	}
	var window time.Duration
	for _, res := range tok.results {
		window = max(window, settleWindow(res.Limit))
	}
	left := window - max(time.Since(tok.admitted), 0)
	if left <= 0 {
		return reservationToken{}, 0, newProblem(probInvalid, fmt.Sprintf(`field "reservation" has expired: a reservation of %s can be settled for %v after it was made`, tok.limits(), window))
	}
	return tok, left, nil
}

// errSettledBefore: the reservation's settlement record is taken.
var errSettledBefore = errors.New("api: the reservation was settled before")

// settleOnce takes the settlement record of reservation id, held for left
// (as long as the reservation can be settled): errSettledBefore when
// another settlement took it; an error wrapping ErrStoreUnavailable when
// the store cannot tell (fail_closed answered).
func (s *Service) settleOnce(r *http.Request, lim *ratewarden.Limiter, id [idBytes]byte, left time.Duration) error {
	ttl := max(left.Round(time.Millisecond), ratewarden.MinPeriod)
	p, err := lim.Acquire(r.Context(), "settled/"+hex.EncodeToString(id[:]), 1, ttl)
	switch {
	case err != nil:
		return err
	case p.Acquired:
		return nil // fail_open acquires without a record: a replay then is not caught
	case p.Source == ratewarden.SourceFailClosed:
		return fmt.Errorf("api: settle: the store cannot tell whether the reservation was settled: %w", ratewarden.ErrStoreUnavailable)
	}
	return errSettledBefore
}

// reservationFailure is the failure policy a reservation of policy (""
// for an inline limit) settles under: the policy's now, else the default
// (the policy may have been removed since).
func (s *Service) reservationFailure(policy string) fallback.Policy {
	sn := s.plan.Load()
	if pp := sn.policies[policy]; pp != nil {
		return pp.fp
	}
	return decide.Failure(sn.cfg, s.defaultFailure)
}

// reservationKey is the store key a reservation counted under: its
// policy's, or the inline limits', as resolve made it.
func reservationKey(policy, key string) string {
	if policy == "" {
		return inlineKeyPrefix + key
	}
	return policyKeyPrefix(policy) + key
}

// inlineKeyPrefix is the start of the store keys of inline limits.
const inlineKeyPrefix = "limit/"

// policyKeyPrefix is the start of the store keys of a named policy:
// policies count apart from each other and from inline limits.
func policyKeyPrefix(name string) string { return "policy/" + url.PathEscape(name) + "/" }

// countSettlement counts a settlement of delta units, applied of which
// took effect.
func (s *Service) countSettlement(policy string, delta, applied int64) {
	switch {
	case delta > 0:
		s.m.Settles.WithLabelValues(policy, "charged").Inc()
		s.m.Settled.WithLabelValues(policy, "charged").Add(float64(applied))
	case delta < 0:
		s.m.Settles.WithLabelValues(policy, "refunded").Inc()
		s.m.Settled.WithLabelValues(policy, "refunded").Add(float64(-applied))
	default:
		s.m.Settles.WithLabelValues(policy, "exact").Inc()
	}
}

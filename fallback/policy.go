package fallback

import (
	"fmt"
	"strconv"

	"github.com/ratewarden/ratewarden"
)

// Policy is what a Store does when the primary store cannot decide: the call
// failed, timed out, or the circuit breaker is open.
//
// The zero Policy is not valid; New uses LocalFallback unless WithPolicy
// says otherwise.
type Policy uint8

const (
	// FailOpen allows every request and says so: Source is
	// ratewarden.SourceFailOpen. Nothing is counted during the outage.
	FailOpen Policy = iota + 1
	// FailClosed denies every request with a RetryAfter: Source is
	// ratewarden.SourceFailClosed. Nothing passes during the outage.
	FailClosed
	// LocalFallback decides on an in-process store holding this replica's
	// share of each limit (see WithReplicas): Source is
	// ratewarden.SourceLocalFallback. The replicas together admit about
	// the limit during the outage instead of all or nothing.
	LocalFallback
)

var policyNames = [...]string{FailOpen: "fail_open", FailClosed: "fail_closed", LocalFallback: "local_fallback"}

// String returns fail_open, fail_closed or local_fallback.
func (p Policy) String() string {
	if p.valid() {
		return policyNames[p]
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

func (p Policy) valid() bool { return p >= FailOpen && p <= LocalFallback }

// ParsePolicy is the inverse of Policy.String: it accepts fail_open,
// fail_closed and local_fallback, and reports anything else as an error
// wrapping ratewarden.ErrInvalidConfig.
func ParsePolicy(s string) (Policy, error) {
	for p := FailOpen; p <= LocalFallback; p++ {
		if s == policyNames[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("fallback: unknown policy %q (want fail_open, fail_closed or local_fallback): %w", s, ratewarden.ErrInvalidConfig)
}

// MarshalText implements encoding.TextMarshaler.
func (p Policy) MarshalText() ([]byte, error) {
	if !p.valid() {
		return nil, fmt.Errorf("fallback: invalid policy %d: %w", p, ratewarden.ErrInvalidConfig)
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParsePolicy, so a
// Policy can sit in a YAML, JSON or flag-parsed config.
func (p *Policy) UnmarshalText(b []byte) error {
	v, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// State is the state of a Store's circuit breaker. The zero value is
// StateClosed.
type State uint8

const (
	// StateClosed: calls go to the primary store.
	StateClosed State = iota
	// StateHalfOpen: the breaker lets a few probe calls through to see
	// whether the primary is back; the others get the failure policy.
	StateHalfOpen
	// StateOpen: no call goes to the primary; every check gets the failure
	// policy until the probe interval has passed.
	StateOpen
)

var stateNames = [...]string{"closed", "half_open", "open"}

// String returns closed, half_open or open.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

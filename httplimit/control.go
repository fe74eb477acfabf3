package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/ratewarden/ratewarden"
)

// Reset clears the counters of the client r identifies (WithKey's key
// function) under the rule r matches, in every plan of that rule: the
// client's next request starts from a full allowance, as after a solved
// captcha. A request the middleware would not limit (WithSkip, or no rule
// matches) has nothing to clear: Reset returns nil. Errors are the key
// function's (ErrInvalidKey) or the store's (ErrStoreUnavailable).
func (m *Middleware) Reset(ctx context.Context, r *http.Request) error {
	ru, ck, err := m.target(r)
	if ru == nil || err != nil {
		return err
	}
	return m.resetRule(ctx, ru, ck)
}

// ResetKey clears the counters of the client key key (as the key
// function returns it, e.g. "ip:192.0.2.1", or as given to Check) under
// every rule and plan of the middleware.
func (m *Middleware) ResetKey(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("httplimit: ResetKey: key must not be empty: %w", ratewarden.ErrInvalidKey)
	}
	var errs []error
	for i := range m.rules {
		errs = append(errs, m.resetRule(ctx, &m.rules[i], key))
	}
	return errors.Join(errs...)
}

func (m *Middleware) resetRule(ctx context.Context, ru *rule, ck string) error {
	var errs []error
	for _, p := range ru.plans {
		if err := m.lim.Reset(ctx, p.prefix+ck, p.limits...); err != nil {
			errs = append(errs, fmt.Errorf("httplimit: reset rule %q: %w", ru.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Peek reports what the client r identifies has left under the rule and
// plan r gets, without consuming anything: Info.Decision says whether a
// request of cost 1 would pass now, with the Remaining of each policy, for
// a page that shows the quota. Info.Cost is 1. A request the middleware
// would not limit gets the zero Info (empty Rule) and a nil error.
func (m *Middleware) Peek(ctx context.Context, r *http.Request) (Info, error) {
	ru, ck, err := m.target(r)
	if ru == nil || err != nil {
		return Info{}, err
	}
	p, err := planOf(ru, r)
	if err != nil {
		return Info{}, err
	}
	return m.peek(ctx, ru, p, ck)
}

// PeekKey is Peek for the client key key: one Info per rule and plan of
// the middleware, in the order the rules were given (WithRule's, then the
// default rule) and the plans in each.
func (m *Middleware) PeekKey(ctx context.Context, key string) ([]Info, error) {
	if key == "" {
		return nil, fmt.Errorf("httplimit: PeekKey: key must not be empty: %w", ratewarden.ErrInvalidKey)
	}
	var out []Info
	for i := range m.rules {
		ru := &m.rules[i]
		for _, p := range ru.plans {
			info, err := m.peek(ctx, ru, p, key)
			if err != nil {
				return nil, err
			}
			out = append(out, info)
		}
	}
	return out, nil
}

func (m *Middleware) peek(ctx context.Context, ru *rule, p *plan, ck string) (Info, error) {
	info := Info{Rule: ru.Name, Plan: p.name, Key: p.prefix + ck, Cost: 1, Policies: p.policies}
	d := ratewarden.Decision{Allowed: true, Results: make([]ratewarden.Result, len(p.limits))}
	for i, l := range p.limits {
		res, err := m.lim.Peek(ctx, info.Key, l)
		if err != nil {
			return Info{}, fmt.Errorf("httplimit: peek rule %q: %w", ru.Name, err)
		}
		d.Results[i] = res
		d.Allowed = d.Allowed && res.Allowed
	}
	info.Decision = d
	return info, nil
}

// target is the rule r matches and the client key of r; a nil rule when
// the middleware does not limit r.
func (m *Middleware) target(r *http.Request) (*rule, string, error) {
	if m.skip(r) {
		return nil, "", nil
	}
	ru := m.match(r)
	if ru == nil {
		return nil, "", nil
	}
	ck, err := m.ClientKey(r)
	if err != nil {
		return nil, "", err
	}
	return ru, ck, nil
}

// ClientKey returns the client key the middleware gives r (WithKey's key
// function), the one ResetKey and PeekKey take. Unlike Handler it runs no
// proxy checks. An empty key is an error wrapping ErrInvalidKey.
func (m *Middleware) ClientKey(r *http.Request) (string, error) {
	ck, err := m.key(r)
	if err == nil && ck == "" {
		err = fmt.Errorf("httplimit: key function returned an empty key: %w", ratewarden.ErrInvalidKey)
	}
	return ck, err
}

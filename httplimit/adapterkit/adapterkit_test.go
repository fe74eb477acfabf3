package adapterkit_test

import (
	"errors"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/httplimit/adapterkit"
	"github.com/ratewarden/ratewarden/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The two shapes a Handler may have: a framework whose handlers return
// an error (echo, fiber, gRPC), and one whose handlers answer in place
// (gin). ctx stands for the framework's context; it records who answered.
type (
	ctx struct{ answered []string }

	deniedErr func(c *ctx, info httplimit.Info) error
	errorErr  func(c *ctx, err error) error
	deniedIn  func(c *ctx, info httplimit.Info)
	errorIn   func(c *ctx, err error)

	settings struct {
		on   bool
		name string
	}

	config = adapterkit.Config[*ctx, deniedErr, errorErr, settings]
	option = adapterkit.Option[*ctx, deniedErr, errorErr, settings]
)

func withDenied(fn deniedErr) option { return func(c *config) { c.Denied = fn } }
func withError(fn errorErr) option   { return func(c *config) { c.Error = fn } }
func withOn(on bool) option          { return func(c *config) { c.Settings.on = on } }
func withName(s string) option       { return func(c *config) { c.Settings.name = s } }

// denied and failed are handlers that record their name, so that a test
// can tell which one a Config holds.
func denied(name string) deniedErr {
	return func(c *ctx, _ httplimit.Info) error { c.answered = append(c.answered, name); return nil }
}

func failed(name string) errorErr {
	return func(c *ctx, _ error) error { c.answered = append(c.answered, name); return nil }
}

// answers calls both handlers of c and returns who answered.
func answers(c config) []string {
	x := &ctx{}
	_ = c.Denied(x, httplimit.Info{})
	_ = c.Error(x, errors.New("store down"))
	return x.answered
}

func middleware(t *testing.T) *httplimit.Middleware {
	t.Helper()
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	lim, err := ratewarden.New(st)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New(lim, httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// With no options Configure returns the defaults: handlers and settings.
func TestConfigureDefaults(t *testing.T) {
	defaults := config{Denied: denied("default denied"), Error: failed("default error"), Settings: settings{on: true, name: "x"}}
	for _, opts := range [][]option{nil, {}} {
		c, err := adapterkit.Configure("fwlimit", middleware(t), defaults, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := answers(c); !slices.Equal(got, []string{"default denied", "default error"}) || c.Settings != defaults.Settings {
			t.Errorf("options %v: answered by %q, settings %+v; want the defaults, %+v", opts, got, c.Settings, defaults.Settings)
		}
	}
}

// Options apply in order over the defaults: the last to set a field wins,
// and fields no option sets keep their defaults.
func TestConfigureAppliesOptionsInOrder(t *testing.T) {
	defaults := config{Denied: denied("default denied"), Error: failed("default error"), Settings: settings{on: true, name: "x"}}
	c, err := adapterkit.Configure("fwlimit", middleware(t), defaults, []option{
		withDenied(denied("first")), withOn(false), withDenied(denied("second")), withOn(true), withOn(false),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := answers(c); !slices.Equal(got, []string{"second", "default error"}) || c.Settings != (settings{on: false, name: "x"}) {
		t.Errorf("answered by %q, settings %+v; want second and the default error handler, on false, name x", got, c.Settings)
	}
	// A nil handler set by one option and replaced by a later one is fine:
	// Configure validates the result.
	c, err = adapterkit.Configure("fwlimit", middleware(t), defaults, []option{withError(nil), withError(failed("custom")), withName("y")})
	if err != nil {
		t.Fatal(err)
	}
	if got := answers(c); !slices.Equal(got, []string{"default denied", "custom"}) || c.Settings.name != "y" {
		t.Errorf("answered by %q, settings %+v; want the default denied handler and custom, name y", got, c.Settings)
	}
}

// Every error names the adapter and the setting, wraps
// ratewarden.ErrInvalidConfig, and comes with a zero Config.
func TestConfigureErrors(t *testing.T) {
	mw := middleware(t)
	defaults := config{Denied: denied("d"), Error: failed("e")}
	for _, tc := range []struct {
		name     string
		mw       *httplimit.Middleware
		defaults config
		opts     []option
		want     string
	}{
		{"nil middleware", nil, defaults, nil, "fwlimit: middleware must not be nil: invalid config"},
		{"nil middleware before options", nil, defaults, []option{nil}, "fwlimit: middleware must not be nil: invalid config"},
		{"nil option", mw, defaults, []option{withOn(true), nil}, "fwlimit: option 1 is nil: invalid config"},
		{"nil denied handler", mw, defaults, []option{withDenied(nil)}, "fwlimit: WithDeniedHandler: handler must not be nil: invalid config"},
		{"nil error handler", mw, defaults, []option{withError(nil)}, "fwlimit: WithErrorHandler: handler must not be nil: invalid config"},
		{"both nil: denied first", mw, defaults, []option{withError(nil), withDenied(nil)}, "fwlimit: WithDeniedHandler: handler must not be nil: invalid config"},
		{"nil default denied handler", mw, config{Error: failed("e")}, nil, "fwlimit: WithDeniedHandler: handler must not be nil: invalid config"},
		{"nil default error handler", mw, config{Denied: denied("d")}, nil, "fwlimit: WithErrorHandler: handler must not be nil: invalid config"},
	} {
		c, err := adapterkit.Configure("fwlimit", tc.mw, tc.defaults, tc.opts)
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || err.Error() != tc.want {
			t.Errorf("%s: %v; want %q wrapping ErrInvalidConfig", tc.name, err, tc.want)
		}
		if c.Denied != nil || c.Error != nil || c.Settings != (settings{}) {
			t.Errorf("%s: Config %+v with the error; want the zero Config", tc.name, c.Settings)
		}
	}
}

// Handlers that answer in place (no result, as gin's) are configured and
// checked the same way.
func TestConfigureHandlersWithoutResult(t *testing.T) {
	type inConfig = adapterkit.Config[*ctx, deniedIn, errorIn, struct{}]
	type inOption = adapterkit.Option[*ctx, deniedIn, errorIn, struct{}]
	d := func(c *ctx, _ httplimit.Info) { c.answered = append(c.answered, "denied") }
	e := func(c *ctx, _ error) { c.answered = append(c.answered, "error") }
	mw := middleware(t)
	c, err := adapterkit.Configure("ginlike", mw, inConfig{Denied: d, Error: e}, nil)
	if err != nil {
		t.Fatal(err)
	}
	x := &ctx{}
	c.Denied(x, httplimit.Info{})
	c.Error(x, errors.New("store down"))
	if !slices.Equal(x.answered, []string{"denied", "error"}) {
		t.Errorf("answered by %q; want denied, error", x.answered)
	}
	_, err = adapterkit.Configure("ginlike", mw, inConfig{Denied: d, Error: e}, []inOption{func(c *inConfig) { c.Error = nil }})
	if want := "ginlike: WithErrorHandler: handler must not be nil: invalid config"; !errors.Is(err, ratewarden.ErrInvalidConfig) || err.Error() != want {
		t.Errorf("%v; want %q", err, want)
	}
}

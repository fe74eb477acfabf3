package ratewarden

import "fmt"

// Option configures a Limiter; pass options to New. Options only record
// their value, and New refuses a nil one with ErrInvalidConfig. When an
// option is given twice, the last one counts.
type Option func(*config)

// config is what the options of New collect.
type config struct {
	observer Observer
}

// newConfig applies opts to the defaults. Its settings have no rule to
// validate: any Observer will do, and nil removes it.
func newConfig(opts []Option) (config, error) {
	var c config
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("ratewarden: option %d is nil: %w", i, ErrInvalidConfig)
		}
		o(&c)
	}
	return c, nil
}

// Observer is told of every check a Limiter makes, after the store
// answered: key, the results (one per limit; nil when err is not nil) and
// the error. It runs on the caller's goroutine and must be quick; it must not
// retain results.
type Observer func(key string, results []Result, err error)

// WithObserver registers fn to be called after every Allow, AllowN,
// AllowAll, Peek, AllowKeys and PeekKeys (for logging or metrics). Nil
// removes it.
func WithObserver(fn Observer) Option {
	return func(c *config) { c.observer = fn }
}

package ratewarden

// Option configures a Limiter; pass options to New.
type Option func(*config)

// config is what the options of New collect; New validates it.
type config struct {
	observer Observer
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

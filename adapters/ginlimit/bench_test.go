package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/ginlimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
)

// BenchmarkHandler serves one request at a time through gin on a
// memstore: bare gin (the baseline), the adapter with one limit, and the
// adapter under WithCountIf and WithMaxInFlight (reserve, settle,
// acquire, release per request).
func BenchmarkHandler(b *testing.B) {
	lots := ratewarden.Limit{Algorithm: ratewarden.SlidingWindow, Rate: 1_000_000_000, Period: time.Second}
	for _, bc := range []struct {
		name string
		opts []httplimit.Option // nil: no limiter
	}{
		{"gin", nil},
		{"limit", []httplimit.Option{httplimit.WithLimits(lots)}},
		{"countif+inflight", []httplimit.Option{httplimit.WithLimits(lots), httplimit.WithCountIf(httplimit.Failed), httplimit.WithMaxInFlight(1, time.Minute)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := gin.New()
			if bc.opts != nil {
				g, err := ginlimit.New(adaptertest.Middleware(b, adaptertest.MemLimiter(b), bc.opts...))
				if err != nil {
					b.Fatal(err)
				}
				r.Use(g.Handler())
			}
			r.GET("/r", func(c *gin.Context) { c.Status(http.StatusNoContent) })
			req := httptest.NewRequest(http.MethodGet, "/r", nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				r.ServeHTTP(w, req)
				if w.Code != http.StatusNoContent {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

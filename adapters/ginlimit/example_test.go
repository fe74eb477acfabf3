package ginlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/adapters/ginlimit"
	"github.com/ratewarden/ratewarden/httplimit"
	"github.com/ratewarden/ratewarden/internal/adaptertest"
)

func get(h http.Handler, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "203.0.113.7:5000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func ExampleNew() {
	gin.SetMode(gin.ReleaseMode)
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(2)))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := ginlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(gl.Handler())
	router.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	for range 3 {
		w := get(router, "/hello")
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	w := get(router, "/hello")
	fmt.Println(w.Header().Get("Content-Type"), w.Header().Get("Retry-After"))
	fmt.Println(w.Body.String())
	// Output:
	// 200 "2/1m";r=1;t=30
	// 200 "2/1m";r=0;t=60
	// 429 "2/1m";r=0;t=30
	// application/problem+json 30
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Rate limit \"2/1m\" exceeded; retry in 30 s.","retry_after":30,"violated-policies":["2/1m"]}
}

func ExampleMiddleware_Handler() {
	gin.SetMode(gin.ReleaseMode)
	// Per-route limits by the route's pattern: every item shares one budget.
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Pattern))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := ginlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.GET("/items/:id", gl.Handler(), func(c *gin.Context) { c.String(http.StatusOK, "item") })
	fmt.Println(get(router, "/items/1").Code, get(router, "/items/2").Code)
	// Output: 200 429
}

func ExampleMiddleware_Check() {
	gin.SetMode(gin.ReleaseMode)
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithRule(httplimit.Rule{
		Name: "login-user", Policies: []httplimit.Policy{{Name: "logins", Limit: ratewarden.PerMinute(1)}},
	}))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := ginlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.GET("/login", func(c *gin.Context) {
		if !gl.Check(c, "user:"+c.Query("user")) {
			return // answered and aborted
		}
		c.String(http.StatusOK, "checking the password")
	})
	fmt.Println(get(router, "/login?user=ann").Code, get(router, "/login?user=ann").Code, get(router, "/login?user=bob").Code)
	// Output: 200 429 200
}

func ExampleWithDeniedHandler() {
	gin.SetMode(gin.ReleaseMode)
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := ginlimit.New(mw, ginlimit.WithDeniedHandler(func(c *gin.Context, info httplimit.Info) {
		c.AbortWithStatusJSON(http.StatusTooManyRequests, gin.H{"error": "slow down", "rule": info.Rule})
	}))
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(gl.Handler())
	router.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	get(router, "/")
	fmt.Println(get(router, "/").Body.String())
	// Output: {"error":"slow down","rule":"default"}
}

func ExampleWithErrorHandler() {
	gin.SetMode(gin.ReleaseMode)
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := ginlimit.New(mw, ginlimit.WithErrorHandler(func(c *gin.Context, err error) {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "send an API key"})
	}))
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(gl.Handler())
	router.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	w := get(router, "/")
	fmt.Println(w.Code, w.Body.String())
	// Output: 401 {"error":"send an API key"}
}

func ExampleDenied() {
	gin.SetMode(gin.ReleaseMode)
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	// Denied is the default; a custom handler can log and then call it.
	gl, err := ginlimit.New(mw, ginlimit.WithDeniedHandler(func(c *gin.Context, info httplimit.Info) {
		fmt.Println("denied", info.Key)
		ginlimit.Denied(c, info)
	}))
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(gl.Handler())
	router.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	get(router, "/")
	fmt.Println(get(router, "/").Code)
	// Output:
	// denied default|ip:203.0.113.7
	// 429
}

func ExampleError() {
	gin.SetMode(gin.ReleaseMode)
	mw, err := httplimit.New(adaptertest.StillLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)), httplimit.WithKey(httplimit.Header("X-Api-Key")))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := ginlimit.New(mw) // Error is the default
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.Use(gl.Handler())
	router.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	w := get(router, "/")
	fmt.Println(w.Code, strings.Contains(w.Body.String(), "does not identify a client"))
	// Output: 400 true
}

// Login protection: only failed logins count (httplimit.WithCountIf with
// Failed), keyed by the user name the handler reads, so Check does the
// limiting and Settle settles each check by the response's status.
func ExampleSettle() {
	gin.SetMode(gin.ReleaseMode)
	mw, err := httplimit.New(adaptertest.StillLimiter(),
		httplimit.WithRule(httplimit.Rule{Name: "login-user", Policies: []httplimit.Policy{{Name: "failures", Limit: ratewarden.PerHour(3)}}}),
		httplimit.WithCountIf(httplimit.Failed))
	if err != nil {
		log.Fatal(err)
	}
	gl, err := ginlimit.New(mw)
	if err != nil {
		log.Fatal(err)
	}
	router := gin.New()
	router.GET("/login", ginlimit.Settle(), func(c *gin.Context) {
		if !gl.Check(c, "user:"+c.Query("user")) {
			return // answered and aborted
		}
		if c.Query("password") != "secret" {
			c.AbortWithStatus(http.StatusUnauthorized)
			return
		}
		c.String(http.StatusOK, "welcome")
	})
	var codes []int
	for _, pw := range []string{"secret", "secret", "secret", "guess", "guess", "guess", "guess", "secret"} {
		codes = append(codes, get(router, "/login?user=ann&password="+pw).Code)
	}
	fmt.Println(codes)
	// Output: [200 200 200 401 401 401 429 429]
}

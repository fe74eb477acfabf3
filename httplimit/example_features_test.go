package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// userPlan is a LimitFunc: the plan of the authenticated user. Here the
// user is the X-User header and every user but "ann" is on the free plan.
func userPlan(r *http.Request) (string, error) {
	if r.Header.Get("X-User") == "ann" {
		return "pro", nil
	}
	return "free", nil
}

func ExampleWithLimitFunc() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithKey(httplimit.Header("X-User")),
		httplimit.WithLimitFunc(userPlan,
			httplimit.Plan{Name: "free", Policies: []httplimit.Policy{{Name: "free", Limit: ratewarden.PerMinute(2)}}},
			httplimit.Plan{Name: "pro", Policies: []httplimit.Policy{{Name: "pro", Limit: ratewarden.PerMinute(100)}}}))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	for _, user := range []string{"bob", "bob", "bob", "ann"} {
		w := send(h, "203.0.113.7:5000", "/", "X-User", user)
		fmt.Println(user, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// bob 200 "free";q=2;w=60
	// bob 200 "free";q=2;w=60
	// bob 429 "free";q=2;w=60
	// ann 200 "pro";q=100;w=60
}

func ExampleMiddleware_Check() {
	// A Middleware of its own for the login form's usernames.
	logins, err := httplimit.New(exampleLimiter(), httplimit.WithRule(httplimit.Rule{
		Name: "login-user",
		// Logins: exactly 2 in any minute, a sliding log.
		Policies: []httplimit.Policy{{Name: "logins", Limit: ratewarden.Limit{Algorithm: ratewarden.SlidingLog, Rate: 2, Period: time.Minute}}},
	}))
	if err != nil {
		log.Fatal(err)
	}
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !logins.Check(w, r, "user:"+r.FormValue("user")) {
			return // the 429 (or error) is written
		}
		fmt.Fprint(w, "checking the password")
	})
	for range 3 {
		w := send(login, "203.0.113.7:5000", "/login?user=ann")
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "logins";r=1;t=60
	// 200 "logins";r=0;t=60
	// 429 "logins";r=0;t=60
}

func ExampleMiddleware_Reset() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	fmt.Println(send(h, "203.0.113.7:5000", "/").Code, send(h, "203.0.113.7:5000", "/").Code)
	// The client solved a captcha: clear its counters.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:5000"
	if err := mw.Reset(context.Background(), r); err != nil {
		log.Fatal(err)
	}
	fmt.Println(send(h, "203.0.113.7:5000", "/").Code)
	// Output:
	// 200 429
	// 200
}

func ExampleMiddleware_ResetKey() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(hi)
	send(h, "203.0.113.7:5000", "/")
	// An operator clears a client by the key the logs show.
	if err := mw.ResetKey(context.Background(), "ip:203.0.113.7"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(send(h, "203.0.113.7:5000", "/").Code)
	// Output: 200
}

func ExampleMiddleware_Peek() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(10)))
	if err != nil {
		log.Fatal(err)
	}
	send(mw.Handler(hi), "203.0.113.7:5000", "/")
	// A quota page: what does this client have left?
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:5000"
	info, err := mw.Peek(context.Background(), r)
	if err != nil {
		log.Fatal(err)
	}
	for i, p := range info.Policies {
		fmt.Printf("%s: %d left\n", p.Name, info.Decision.Results[i].Remaining)
	}
	// Output: 10/1m: 9 left
}

func ExampleMiddleware_PeekKey() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(10)),
		httplimit.WithRule(httplimit.Rule{
			Name:     "search",
			Match:    func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/search") },
			Policies: []httplimit.Policy{{Name: "searches", Limit: ratewarden.PerMinute(3)}},
		}))
	if err != nil {
		log.Fatal(err)
	}
	send(mw.Handler(hi), "203.0.113.7:5000", "/search?q=go")
	infos, err := mw.PeekKey(context.Background(), "ip:203.0.113.7")
	if err != nil {
		log.Fatal(err)
	}
	for _, info := range infos {
		fmt.Printf("%s: %d left\n", info.Rule, info.Decision.Results[0].Remaining)
	}
	// Output:
	// search: 2 left
	// default: 10 left
}

func ExampleMiddleware_ClientKey() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(10)))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:5000"
	fmt.Println(mw.ClientKey(r))
	// Output: ip:203.0.113.7 <nil>
}

func ExampleMiddleware_Decide() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	// An adapter to another framework decides, then answers in its terms.
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:5000"
		v := mw.Decide(r)
		h := http.Header{}
		v.SetHeaders(h)
		switch {
		case v.Proceed:
			fmt.Println("pass; remaining", h.Get("X-RateLimit-Remaining"))
		case v.Rejected():
			fmt.Println("deny:", httplimit.DeniedProblem(v.Info).Detail, "Retry-After", h.Get("Retry-After"))
		default:
			fmt.Println("error:", httplimit.ErrorProblem(v.Err).Status)
		}
	}
	// Output:
	// pass; remaining 0
	// deny: Rate limit "1/1m" exceeded; retry in 60 s. Retry-After 60
}

func ExampleMiddleware_DecideKey() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(5)))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	v := mw.DecideKey(r, "tenant:acme")
	fmt.Println(v.Proceed, v.Info.Key, v.Info.Decision.Results[0].Remaining)
	// Output: true default|tenant:acme 4
}

func ExampleVerdict_AppendFields() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(5)))
	if err != nil {
		log.Fatal(err)
	}
	v := mw.DecideKey(httptest.NewRequest(http.MethodGet, "/", nil), "tenant:acme")
	for _, f := range v.AppendFields(nil) {
		if !strings.HasSuffix(f.Name, "Reset") { // a Unix time: changes
			fmt.Printf("%s: %s\n", strings.ToLower(f.Name), f.Value)
		}
	}
	// Output:
	// ratelimit-policy: "5/1m";q=5;w=60
	// ratelimit: "5/1m";r=4;t=12
	// x-ratelimit-limit: 5
	// x-ratelimit-remaining: 4
}

func ExampleVerdict_SetHeaders() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(5)), httplimit.WithHeaders(httplimit.DraftHeaders))
	if err != nil {
		log.Fatal(err)
	}
	v := mw.DecideKey(httptest.NewRequest(http.MethodGet, "/", nil), "tenant:acme")
	h := http.Header{}
	v.SetHeaders(h)
	fmt.Println(h.Get("RateLimit"))
	// Output: "5/1m";r=4;t=12
}

func ExampleVerdict_Rejected() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	fmt.Println(mw.DecideKey(r, "k").Rejected(), mw.DecideKey(r, "k").Rejected())
	// Output: false true
}

func ExampleDeniedProblem() {
	mw, err := httplimit.New(exampleLimiter(), httplimit.WithLimits(ratewarden.PerMinute(1)))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	mw.DecideKey(r, "k")
	p := httplimit.DeniedProblem(mw.DecideKey(r, "k").Info)
	fmt.Println(p.Status, p.RetryAfter, p.ViolatedPolicies)
	// Output: 429 60 [1/1m]
}

func ExampleErrorProblem() {
	p := httplimit.ErrorProblem(fmt.Errorf("no API key: %w", ratewarden.ErrInvalidKey))
	fmt.Println(p.Status, p.Detail)
	// Output: 400 The request does not identify a client for rate limiting.
}

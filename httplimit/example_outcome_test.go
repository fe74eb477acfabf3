package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/httplimit"
)

// userOfForm keys a login attempt by the user it names.
func userOfForm(r *http.Request) (string, error) {
	u := r.PostFormValue("user")
	if u == "" {
		return "", fmt.Errorf("no user: %w", ratewarden.ErrInvalidKey)
	}
	return "user:" + u, nil
}

// postForm sends form through h and returns the response.
func postForm(h http.Handler, form url.Values) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "203.0.113.7:5000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// Login protection: 3 failed logins per 15 minutes per user. Successful
// logins give back the unit they reserved, so they never lock a user out;
// after 3 failures every attempt is denied, the right password too, until
// the window ends.
func ExampleWithCountIf() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithPolicies(httplimit.Policy{Name: "failed-logins",
			Limit: ratewarden.Limit{Algorithm: ratewarden.FixedWindow, Rate: 3, Period: 15 * time.Minute}}),
		httplimit.WithKey(userOfForm),
		httplimit.WithCountIf(httplimit.Failed))
	if err != nil {
		log.Fatal(err)
	}
	login := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("password") != "s3cret" {
			http.Error(w, "wrong user or password", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "welcome")
	}))
	for _, pw := range []string{"s3cret", "s3cret", "guess1", "guess2", "guess3", "s3cret"} {
		w := postForm(login, url.Values{"user": {"ann"}, "password": {pw}})
		fmt.Println(pw, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// s3cret 200 "failed-logins";r=2;t=880
	// s3cret 200 "failed-logins";r=2;t=880
	// guess1 401 "failed-logins";r=2;t=880
	// guess2 401 "failed-logins";r=1;t=880
	// guess3 401 "failed-logins";r=0;t=880
	// s3cret 429 "failed-logins";r=0;t=880
}

// At most 2 reports per client in the making at once, on every replica
// together; a third is turned away until one ends.
func ExampleWithMaxInFlight() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.PerMinute(100)),
		httplimit.WithMaxInFlight(2, 30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	entered, finish := make(chan struct{}, 3), make(chan struct{})
	report := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-finish // a slow report
		fmt.Fprint(w, "report")
	}))
	done := make(chan int)
	for range 2 {
		go func() { done <- send(report, "203.0.113.7:5000", "/report").Code }()
		<-entered
	}
	w := send(report, "203.0.113.7:5000", "/report")
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"))
	fmt.Print(w.Body.String())

	finish <- struct{}{}
	fmt.Println(<-done)
	// One ended: the next one gets in.
	go func() { done <- send(report, "203.0.113.7:5000", "/report").Code }()
	<-entered
	close(finish)
	fmt.Println(<-done, <-done)
	// Output:
	// 429 Retry-After: 30
	// {"type":"about:blank","title":"Too Many Requests","status":429,"detail":"Too many requests in flight: at most 2 at once; retry in 30 s.","retry_after":30,"max-in-flight":2}
	// 200
	// 200 200
}

// An adapter to another framework decides with Decide and, once the
// request has been served, tells the middleware how it ended with Done.
func ExampleVerdict_Done() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.PerMinute(5)),
		httplimit.WithCountIf(httplimit.Failed))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:5000"
	for _, status := range []int{http.StatusOK, http.StatusNotFound, http.StatusOK} {
		v := mw.Decide(r)
		if !v.Proceed {
			return
		}
		// ... the framework serves the request, which ends with status ...
		v.Done(status)
		fmt.Println(status, "remaining before:", v.Info.Decision.Results[0].Remaining)
	}
	// Output:
	// 200 remaining before: 4
	// 404 remaining before: 4
	// 200 remaining before: 3
}

func ExampleVerdict_DoneAfter() {
	mw, err := httplimit.New(exampleLimiter(),
		httplimit.WithLimits(ratewarden.PerMinute(100)),
		httplimit.WithMaxInFlight(1, 30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx, requestEnds := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	r.RemoteAddr = "203.0.113.7:5000"
	v := mw.Decide(r)
	// A check inside a handler nobody wraps: it ends with the request.
	v.DoneAfter(ctx)
	fmt.Println("second request while the first runs:", mw.Decide(r.Clone(context.Background())).Proceed)
	requestEnds()
	// The release runs on a goroutine of its own, soon after.
	for range 10_000 {
		next := mw.Decide(r.Clone(context.Background()))
		next.Done(http.StatusOK)
		if next.Proceed {
			fmt.Println("second request after the first ended: admitted")
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Output:
	// second request while the first runs: false
	// second request after the first ended: admitted
}

package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratewarden/ratewarden/service/config"
	"github.com/ratewarden/ratewarden/service/internal/backend"
	"github.com/ratewarden/ratewarden/service/server"
	"github.com/ratewarden/ratewarden/service/server/api"
)

// startExampleServer starts a server on cfg, in memory, and returns its base
// URL and a function that stops it.
func startExampleServer(cfg string, opts ...server.Option) (string, func(), error) {
	b, err := backend.NewMemory(server.DefaultMaxKeyBytes)
	if err != nil {
		return "", nil, err
	}
	c, err := config.Parse("example.yaml", []byte(cfg))
	if err != nil {
		b.Close()
		return "", nil, err
	}
	opts = append([]server.Option{server.WithConfig(c), server.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	s, err := server.New(b, opts...)
	if err == nil {
		err = s.Start("127.0.0.1:0", "127.0.0.1:0")
	}
	if err != nil {
		b.Close()
		return "", nil, err
	}
	return "http://" + s.HTTPAddr(), func() {
		http.DefaultClient.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		b.Close()
	}, nil
}

// postJSON posts body to url and decodes the JSON answer into out.
func postJSON(url, body string, out any) (int, error) {
	resp, err := http.Post(url, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(out)
}

// ExampleAcquisition caps a tenant's jobs in flight with a concurrency
// policy: two permits, a third refused with 429 until one is released.
// The permit is all that release and extend need, on any replica.
func ExampleAcquisition() {
	url, stop, err := startExampleServer("policies:\n  jobs: {max_in_flight: 2, ttl: 30s}\n")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	var permits []string
	for range 3 {
		var a api.Acquisition
		status, err := postJSON(url+"/v1/acquire", `{"key":"tenant-7","policy":"jobs"}`, &a)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%d acquired=%t held=%d/%d\n", status, a.Acquired, a.Held, a.Max)
		if a.Acquired {
			permits = append(permits, a.Permit)
		}
	}
	var ans api.PermitAnswer
	status, _ := postJSON(url+"/v1/extend", `{"permit":"`+permits[0]+`","ttl_ms":10000}`, &ans)
	fmt.Printf("extend: %d ttl_ms=%d\n", status, ans.TTLMS)
	status, _ = postJSON(url+"/v1/release", `{"permit":"`+permits[0]+`"}`, &ans)
	fmt.Printf("release: %d released=%t\n", status, *ans.Released)
	var a api.Acquisition
	status, _ = postJSON(url+"/v1/acquire", `{"key":"tenant-7","policy":"jobs"}`, &a)
	fmt.Printf("%d acquired=%t held=%d/%d\n", status, a.Acquired, a.Held, a.Max)
	// Output:
	// 200 acquired=true held=1/2
	// 200 acquired=true held=2/2
	// 429 acquired=false held=2/2
	// extend: 200 ttl_ms=10000
	// release: 200 released=true
	// 200 acquired=true held=2/2
}

// ExampleSettlement limits an LLM gateway's tokens per day when a
// completion's size is known only at its end: reserve an estimate, then
// settle the actual count. The difference is given back (or charged) in
// one store call; a second settlement of the reservation is refused.
func ExampleSettlement() {
	url, stop, err := startExampleServer("policies:\n  llm-tokens: 1000000/1d fixed_window\n",
		server.WithReservationSecrets([]byte("shared by every replica, 16+ bytes")))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	var r api.Reservation
	if _, err := postJSON(url+"/v1/reserve", `{"key":"team-a","policy":"llm-tokens","estimate":4000}`, &r); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("reserved: allowed=%t remaining=%d\n", r.Allowed, r.Remaining)
	var st api.Settlement
	status, _ := postJSON(url+"/v1/settle", `{"reservation":"`+r.Reservation+`","actual":1234}`, &st)
	fmt.Printf("settled: %d delta=%d applied=%v\n", status, st.Delta, st.Applied)
	var d api.Decision
	_, _ = postJSON(url+"/v1/peek", `{"key":"team-a","policy":"llm-tokens","cost":0}`, &d)
	fmt.Printf("remaining=%d\n", d.Remaining)
	var p struct{ Type string }
	status, _ = postJSON(url+"/v1/settle", `{"reservation":"`+r.Reservation+`","actual":1234}`, &p)
	fmt.Println("again:", status, p.Type)
	// Output:
	// reserved: allowed=true remaining=996000
	// settled: 200 delta=-2766 applied=[-2766]
	// remaining=998766
	// again: 409 https://ratewarden.dev/problems/already-settled
}

package server_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ratewarden/ratewarden/service/server"
)

// TestStoreSpansOfPermitsAndSettlements: each store call of the new
// endpoints is a span, as a check's is, with its outcome and no key.
func TestStoreSpansOfPermitsAndSettlements(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	s := start(t, memBackend(t), server.WithConfig(parseConfig(t, permitPolicies+"  tokens: 100/1h\n")), server.WithTracerProvider(tp))

	const key = "traced-caller-key"
	p := permitOf(t, "acquire", acquire(t, s, key, "jobs"))
	post(t, s, "/v1/extend", fmt.Sprintf(`{"permit":%q}`, p))
	post(t, s, "/v1/release", fmt.Sprintf(`{"permit":%q}`, p))
	_, tok := reserve(t, s, `{"key":"`+key+`","policy":"tokens","estimate":5}`)
	wantSettled(t, "settle", settle(t, s, tok, 2), -3, -3)

	var names []string
	for _, sp := range rec.Ended() {
		names = append(names, sp.Name())
		attrs := map[string]string{}
		for _, a := range sp.Attributes() {
			attrs[string(a.Key)] = a.Value.String()
			if strings.Contains(a.Value.String(), key) {
				t.Errorf("span %s carries the caller's key in %s", sp.Name(), a.Key)
			}
		}
		switch sp.Name() {
		case "ratewarden.store.acquire":
			if attrs["ratewarden.allowed"] != "true" || attrs["ratewarden.source"] != "store" {
				t.Errorf("acquire span: %v", attrs)
			}
		case "ratewarden.store.release", "ratewarden.store.extend":
			if attrs["ratewarden.permit_held"] != "true" {
				t.Errorf("%s span: %v", sp.Name(), attrs)
			}
		}
		if attrs["ratewarden.failure_policy"] == "" {
			t.Errorf("span %s without its failure policy: %v", sp.Name(), attrs)
		}
	}
	// The settlement: its record (an acquire) and its charge.
	for _, want := range []string{"ratewarden.store.acquire", "ratewarden.store.extend", "ratewarden.store.release", "ratewarden.store.check", "ratewarden.store.charge"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s span among %v", want, names)
		}
	}
}

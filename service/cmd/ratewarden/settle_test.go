package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testredis"
)

// TestReservationSecretAcrossProcesses: two `ratewarden serve` processes
// on one Redis, given the same --reservation-secret, settle each other's
// reservations; a third without it refuses them, and says at startup
// that it would.
func TestReservationSecretAcrossProcesses(t *testing.T) {
	rs := testredis.Start(t)
	cfg := writeFile(t, t.TempDir(), "policies.yaml", "policies:\n  tokens: 1000/1h fixed_window\n")
	const secret = "a-secret-every-replica-shares-32"
	common := []string{"--redis", "redis://" + rs.Addr, "--redis-timeout", "5s", "--config", cfg}
	a := startProcess(t, append(common, "--reservation-secret", secret)...)
	b := startProcess(t, append(common, "--reservation-secret", secret)...)
	c := startProcess(t, common...)
	client := &http.Client{}
	defer client.CloseIdleConnections()

	code, body := send(t, client, "http://"+a.http+"/v1/reserve", "application/json", `{"key":"k","policy":"tokens","estimate":100}`)
	var rv struct {
		Reservation string `json:"reservation"`
		Remaining   int64  `json:"remaining"`
	}
	if err := json.Unmarshal([]byte(body), &rv); code != 200 || err != nil || rv.Reservation == "" {
		t.Fatalf("reserve on A: %d %s", code, body)
	}
	settle := `{"reservation":"` + rv.Reservation + `","actual":30}`
	if code, body := send(t, client, "http://"+c.http+"/v1/settle", "application/json", settle); code != 400 || !strings.Contains(body, "signed with a secret this replica does not hold") {
		t.Fatalf("settle on C, without the secret: %d %s", code, body)
	}
	if code, body := send(t, client, "http://"+b.http+"/v1/settle", "application/json", settle); code != 200 || !strings.Contains(body, `"delta":-70,"applied":[-70]`) {
		t.Fatalf("settle on B: %d %s", code, body)
	}
	if code, body := send(t, client, "http://"+c.http+"/v1/check", "application/json", `{"key":"k","policy":"tokens","cost":0}`); code != 200 || !strings.Contains(body, `"remaining":970`) {
		t.Fatalf("the count after settling 30 of 100: %d %s", code, body)
	}
	if code, body := send(t, client, "http://"+a.http+"/v1/settle", "application/json", settle); code != 409 {
		t.Fatalf("settle again on A: %d %s", code, body)
	}
	if !strings.Contains(c.logs.String(), "no --reservation-secret") || strings.Contains(a.logs.String(), "no --reservation-secret") {
		t.Errorf("the warning of a replica without a secret: A logged\n%s\nC logged\n%s", a.logs.String(), c.logs.String())
	}
	if strings.Contains(a.logs.String(), secret) {
		t.Error("the secret shows in the log")
	}
}

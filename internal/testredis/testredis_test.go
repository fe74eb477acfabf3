package testredis

import "testing"

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	if got, _ := s.Do("CONFIG", "GET", "save"); got != "save\n" {
		t.Fatalf("persistence must be off, CONFIG GET save = %q", got)
	}
	s.Kill()
	if Ping(s.Addr) == nil {
		t.Fatal("server still answers after Kill")
	}
	s.Restart(t)
	if got, err := s.Do("GET", "k"); err != nil || got != "(nil)" {
		t.Fatalf("after restart GET k = %q, %v; want (nil): data must not survive", got, err)
	}
}

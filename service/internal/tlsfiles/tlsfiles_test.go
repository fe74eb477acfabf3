package tlsfiles_test

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden"
	"github.com/ratewarden/ratewarden/service/internal/tlsfiles"
)

// TestServerNeedsAPair: a server's TLS needs a certificate and a key; a
// client CA alone, or half a pair, is refused before any file is read.
func TestServerNeedsAPair(t *testing.T) {
	for _, f := range []tlsfiles.Server{{CertFile: "c.pem"}, {KeyFile: "k.pem"}, {ClientCAFile: "ca.pem"}} {
		if !f.Given() {
			t.Errorf("%+v: Given false", f)
		}
		_, err := f.Config(nil)
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), "a certificate and a key file are both needed") {
			t.Errorf("%+v: Config = %v, want an invalid-config error asking for both", f, err)
		}
	}
	if (tlsfiles.Server{ClientSAN: "envoy"}).Given() {
		t.Error("a SAN alone: Given true, want false (it only narrows a client CA)")
	}
}

// TestClientApplyNamesTheBadFile: a client's CA or certificate that does
// not load is an invalid-config error saying which.
func TestClientApplyNamesTheBadFile(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		f    tlsfiles.Client
		want string
	}{
		{tlsfiles.Client{CAFile: missing}, "CA: open " + missing},
		{tlsfiles.Client{CAFile: garbage}, "CA " + garbage + ": no PEM certificate"},
		{tlsfiles.Client{CertFile: garbage, KeyFile: garbage}, "client certificate:"},
		{tlsfiles.Client{CertFile: missing}, "client certificate:"},
	} {
		if !tc.f.Given() {
			t.Errorf("%+v: Given false", tc.f)
		}
		tcfg := &tls.Config{}
		err := tc.f.Apply(tcfg)
		if !errors.Is(err, ratewarden.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Apply = %v, want an invalid-config error saying %q", tc.f, err, tc.want)
		}
	}
	if (tlsfiles.Client{}).Given() {
		t.Error("the zero Client: Given true")
	}
	if err := (tlsfiles.Client{SkipHostname: true}).Apply(&tls.Config{}); err != nil {
		t.Errorf("SkipHostname alone: %v", err)
	}
}

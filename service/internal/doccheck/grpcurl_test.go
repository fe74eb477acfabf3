package doccheck

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var grpcurlRE = regexp.MustCompile(`^\s*grpcurl\s`)

// grpcurlCall reports whether a sh block is one grpcurl command (possibly
// continued over lines with a backslash).
func grpcurlCall(body string) bool {
	return grpcurlRE.MatchString(body) && strings.Count(strings.ReplaceAll(body, "\\\n", ""), "\n") == 1
}

// grpcurl checks a grpcurl block with the same call made by grpc-go:
// bash splits the command line (a shell function named grpcurl prints its
// arguments), the test makes the call and formats the response as
// grpcurl's default JSON output does (its protobuf JSON, compacted, then
// indented by two spaces).
func (e *docEnv) grpcurl(t *testing.T, b *block) {
	path := e.script(t, b, "grpcurl() { printf '%s\\0' \"$@\"; }\n")
	ctx, cancel := context.WithTimeout(context.Background(), runCap)
	defer cancel()
	var out bytes.Buffer
	if err := command(ctx, e.s.root, e.shellEnv(), &out, "bash", "-e", path).Run(); err != nil {
		t.Fatalf("%s: splitting the grpcurl command line: %v\n%s", b.where(), err, out.String())
	}
	args := strings.Split(strings.TrimSuffix(out.String(), "\x00"), "\x00")
	var data, addr, method string
	plaintext := false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-plaintext":
			plaintext = true
		case a == "-d" && i+1 < len(args):
			i++
			data = args[i]
		case strings.HasPrefix(a, "-"):
			t.Fatalf("%s: grpcurl flag %q: the test's stand-in knows only -plaintext and -d", b.where(), a)
		case addr == "":
			addr = a
		case method == "":
			method = a
		default:
			t.Fatalf("%s: grpcurl: unexpected argument %q", b.where(), a)
		}
	}
	if !plaintext {
		t.Fatalf("%s: grpcurl without -plaintext: the service serves gRPC without TLS", b.where())
	}
	if method != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
		t.Fatalf("%s: grpcurl method %q: the test's stand-in knows only ShouldRateLimit", b.where(), method)
	}
	req := &rlspb.RateLimitRequest{}
	if err := protojson.Unmarshal([]byte(data), req); err != nil {
		t.Fatalf("%s: grpcurl -d: %v", b.where(), err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("%s: %v", b.where(), err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	resp, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(cctx, req)
	if err != nil {
		t.Fatalf("%s: ShouldRateLimit: %v", b.where(), err)
	}
	text, err := grpcurlFormat(resp)
	if err != nil {
		t.Fatalf("%s: %v", b.where(), err)
	}
	e.check(t, b, text, 0, e.unrewriter(e.redis.Addr))
}

// grpcurlFormat prints a message as grpcurl prints a response.
func grpcurlFormat(m proto.Message) (string, error) {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return "", err
	}
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return "", err
	}
	if err := json.Indent(&indented, compact.Bytes(), "", "  "); err != nil {
		return "", err
	}
	return indented.String() + "\n", nil
}

func TestGrpcurlFormat(t *testing.T) {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses: []*rlspb.RateLimitResponse_DescriptorStatus{{
			Code:           rlspb.RateLimitResponse_OK,
			LimitRemaining: 59,
		}},
	}
	got, err := grpcurlFormat(resp)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"overallCode\": \"OK\",\n  \"statuses\": [\n    {\n      \"code\": \"OK\",\n      \"limitRemaining\": 59\n    }\n  ]\n}\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if !grpcurlCall("grpcurl -plaintext -d '{}' \\\n  localhost:8081 x/y\n") || grpcurlCall("grpcurl a b\ncurl c\n") {
		t.Error("grpcurlCall")
	}
}

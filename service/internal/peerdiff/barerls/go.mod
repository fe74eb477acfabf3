// barerls is a module of its own so that it builds with the versions of
// gRPC, protobuf and the Envoy types the service module requires (the
// peerdiff module pins envoyproxy/ratelimit's): the baseline differs from
// `ratewarden serve` in the handler only. Keep them in step.
module github.com/ratewarden/ratewarden/service/internal/peerdiff/barerls

go 1.26.0

require (
	github.com/envoyproxy/go-control-plane/envoy v1.40.0
	github.com/ratewarden/ratewarden v0.0.0
	github.com/redis/rueidis v1.0.79
	google.golang.org/grpc v1.85.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260928230214-8a89bd6388cc // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/ratewarden/ratewarden => ../../../..

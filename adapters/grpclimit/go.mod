module github.com/ratewarden/ratewarden/adapters/grpclimit

go 1.26.0

require (
	github.com/grpc-ecosystem/go-grpc-middleware/v2 v2.3.4
	github.com/ratewarden/ratewarden v0.0.0
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace github.com/ratewarden/ratewarden => ../..

package rls

import (
	"fmt"
	"unicode/utf8"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// badUTF8Field is the unknown field a RateLimitRequest that failed to
// decode for invalid UTF-8 carries, holding the path of the string: grpc-go
// answers any decoding error with INTERNAL before a handler runs, and
// invalid input is the caller's fault (INVALID_ARGUMENT, with the path).
const badUTF8Field = protowire.MaxValidNumber

// Codec is the codec of a gRPC server serving the Service
// (grpc.ForceServerCodecV2): the proto codec, except that a
// RateLimitRequest with an invalid UTF-8 string is INVALID_ARGUMENT with
// the string's path, not the INTERNAL grpc-go answers every decoding
// error with.
func Codec() encoding.CodecV2 { return strictCodec{encoding.GetCodecV2("proto")} }

// strictCodec is the proto codec, except that a RateLimitRequest with an
// invalid UTF-8 string decodes to an empty request carrying badUTF8Field.
type strictCodec struct{ encoding.CodecV2 }

func (c strictCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	req, ok := v.(*rlspb.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	path := badUTF8Path(data.Materialize())
	if path == "" {
		return err
	}
	req.Reset()
	b := protowire.AppendTag(nil, badUTF8Field, protowire.BytesType)
	req.ProtoReflect().SetUnknown(protowire.AppendString(b, path))
	return nil
}

// utf8Error returns the path of the invalid UTF-8 string strictCodec
// found in req, or "".
func utf8Error(req *rlspb.RateLimitRequest) string {
	b := req.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		if num == badUTF8Field && typ == protowire.BytesType {
			s, _ := protowire.ConsumeString(b)
			return s
		}
		b = b[n:]
	}
	return ""
}

// badUTF8Path finds the first string of an encoded RateLimitRequest that
// is not valid UTF-8: domain (field 1) or a descriptor's (field 2) entry's
// (field 1) key (1) or value (2).
func badUTF8Path(b []byte) string {
	d := 0
	return bytesFields(b, func(num protowire.Number, v []byte) string {
		switch num {
		case 1:
			if !utf8.Valid(v) {
				return "domain"
			}
		case 2:
			i := d
			d++
			e := 0
			return bytesFields(v, func(num protowire.Number, v []byte) string {
				if num != 1 {
					return ""
				}
				j := e
				e++
				return bytesFields(v, func(num protowire.Number, v []byte) string {
					if (num == 1 || num == 2) && !utf8.Valid(v) {
						return fmt.Sprintf("descriptors[%d].entries[%d].%s", i, j, map[protowire.Number]string{1: "key", 2: "value"}[num])
					}
					return ""
				})
			})
		}
		return ""
	})
}

// bytesFields calls fn with each length-delimited field of the message b
// until fn returns a path; "" when none does or b is malformed.
func bytesFields(b []byte, fn func(protowire.Number, []byte) string) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if p := fn(num, v); p != "" {
			return p
		}
	}
	return ""
}

package envoyrls

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MaxRequestBytes bounds a RateLimitRequest message on the listener Serve
// runs: 4 MiB, gRPC's default and envoyproxy/ratelimit's. A request is
// built from one HTTP request's headers and path, which Envoy caps at
// 60 KiB (max_request_headers_kb), so every request Envoy sends is read
// and decided; a larger message fails with RESOURCE_EXHAUSTED. It is not
// the header bound (Bounds.MaxHeaderBytes): a descriptor's value is
// whatever a client put in a header.
const MaxRequestBytes = 4 << 20

// MaxDescriptors and MaxEntries bound what one request may hold: its
// descriptors, and the entries of each. Envoy makes one descriptor per
// rate_limits action list of a route, and one entry per action, so the
// bounds are far above any configuration; a request over either is
// answered OVER_LIMIT, with every descriptor OVER_LIMIT and nothing
// charged, whatever Mode says: it was not Envoy's, and is not decided.
// Serve's listener reads no more of such a request than the bounds and
// one more (see boundedCodec), so its memory does not grow with what the
// client sent. A long key or value is no bound: keys longer than
// floodgate.MaxKeyLen are counted by their digest (floodgate.NormalizeKey),
// so any value is decided, in a bucket of its own.
const (
	MaxDescriptors = 256
	MaxEntries     = 64
)

// overBounds says why req is over MaxDescriptors or MaxEntries, or "".
func overBounds(req *rlsv3.RateLimitRequest) string {
	if n := len(req.GetDescriptors()); n > MaxDescriptors {
		return fmt.Sprintf("more than %d descriptors", MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		if len(d.GetEntries()) > MaxEntries {
			return fmt.Sprintf("descriptor %d has more than %d entries", i, MaxEntries)
		}
	}
	return ""
}

// Field numbers of the messages boundedCodec reads.
const (
	fieldDescriptors = 2 // RateLimitRequest.descriptors
	fieldEntries     = 1 // RateLimitDescriptor.entries
)

// boundedCodec is the proto codec, but a RateLimitRequest over
// MaxDescriptors or MaxEntries is decoded with MaxDescriptors+1
// descriptors and MaxEntries+1 entries in each at most: still over the
// bounds, for ShouldRateLimit to answer, without the memory of every
// message the client packed in (a 4 MiB request of empty descriptors
// decodes into a million of them).
type boundedCodec struct{ encoding.CodecV2 }

func (c boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*rlsv3.RateLimitRequest)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if cut, ok := truncate(b); ok {
		b = cut
	}
	return proto.Unmarshal(b, req)
}

// truncate returns the RateLimitRequest b with the descriptors after
// MaxDescriptors+1 left out and the entries of each after MaxEntries+1,
// and true, when b is over the bounds; false when it is not, or does not
// parse (proto.Unmarshal then says why).
func truncate(b []byte) ([]byte, bool) {
	over := false
	descs := 0
	for rest := b; len(rest) > 0; {
		num, typ, n, m := nextField(rest)
		if m < 0 {
			return nil, false
		}
		if num == fieldDescriptors && typ == protowire.BytesType {
			descs++
			d, _ := protowire.ConsumeBytes(rest[n:])
			if descs > MaxDescriptors || countField(d, fieldEntries) > MaxEntries {
				over = true
				break
			}
		}
		rest = rest[n+m:]
	}
	if !over {
		return nil, false
	}
	var out []byte
	descs = 0
	for rest := b; len(rest) > 0; {
		num, typ, n, m := nextField(rest)
		if m < 0 {
			return nil, false
		}
		field := rest[:n+m]
		rest = rest[n+m:]
		if num != fieldDescriptors || typ != protowire.BytesType {
			out = append(out, field...)
			continue
		}
		if descs++; descs > MaxDescriptors+1 {
			continue
		}
		d, _ := protowire.ConsumeBytes(field[n:])
		if countField(d, fieldEntries) <= MaxEntries {
			out = append(out, field...)
			continue
		}
		var kept []byte
		entries := 0
		for dr := d; len(dr) > 0; {
			dn, dt, k, l := nextField(dr)
			if l < 0 {
				return nil, false
			}
			if dn != fieldEntries || dt != protowire.BytesType {
				kept = append(kept, dr[:k+l]...)
			} else if entries++; entries <= MaxEntries+1 {
				kept = append(kept, dr[:k+l]...)
			}
			dr = dr[k+l:]
		}
		out = protowire.AppendTag(out, fieldDescriptors, protowire.BytesType)
		out = protowire.AppendBytes(out, kept)
	}
	return out, true
}

// nextField reads the field at the start of b: its number and wire type,
// the length of its tag and of its value; a negative value length when b
// does not start with a whole field.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, tagLen, valueLen int) {
	num, typ, tagLen = protowire.ConsumeTag(b)
	if tagLen < 0 {
		return 0, 0, 0, -1
	}
	return num, typ, tagLen, protowire.ConsumeFieldValue(num, typ, b[tagLen:])
}

// countField counts the occurrences of field num in the message b, up to
// one over MaxEntries; -1 when b does not parse.
func countField(b []byte, num protowire.Number) int {
	count := 0
	for len(b) > 0 && count <= MaxEntries {
		n, _, k, l := nextField(b)
		if l < 0 {
			return -1
		}
		if n == num {
			count++
		}
		b = b[k+l:]
	}
	return count
}

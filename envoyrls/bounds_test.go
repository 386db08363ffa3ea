package envoyrls

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	pb "google.golang.org/protobuf/proto"
)

// TestLargeDescriptorValuesAreDecided: a descriptor value as large as a
// header Envoy forwards (40 KiB, over the 32 KiB header bound) or larger
// (1 MiB) is decided, by the listener with the daemon's default bounds:
// never an error, which Envoy's default failure_mode_deny: false would let
// through. Each value is counted in a bucket of its own.
func TestLargeDescriptorValuesAreDecided(t *testing.T) {
	rules, lims := rulesOf(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1}}]\n", nil)
	c, _ := rlsClient(t, Config{Rules: rules, Limiters: lims, Bounds: Bounds{MaxHeaderBytes: 32 << 10}})
	for _, n := range []int{40 << 10, 1 << 20} {
		for _, v := range []string{strings.Repeat("a", n), strings.Repeat("b", n)} {
			req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(nil, "k", v)}}
			if got := call(t, c, req).OverallCode; got != rlsv3.RateLimitResponse_OK {
				t.Errorf("a %d-byte value, first call: %v, want OK", n, got)
			}
			if got := call(t, c, req).OverallCode; got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("a %d-byte value, second call: %v, want OVER_LIMIT", n, got)
			}
		}
	}
}

// TestOverBoundsIsOverLimit: a request with more than MaxDescriptors
// descriptors, or a descriptor with more than MaxEntries entries, is
// answered OVER_LIMIT, in shadow mode too, and charges nothing.
func TestOverBoundsIsOverLimit(t *testing.T) {
	rules, lims := rulesOf(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1000}}]\n", nil)
	for _, shadow := range []bool{false, true} {
		c, _ := rlsClient(t, Config{Rules: rules, Limiters: lims, Mode: Mode{ShadowMode: shadow}})
		many := &rlsv3.RateLimitRequest{Domain: "d"}
		for range MaxDescriptors + 1 {
			many.Descriptors = append(many.Descriptors, desc(nil, "k", "many"))
		}
		deep := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(nil, "k", "deep")}}
		for range MaxEntries {
			deep.Descriptors[0].Entries = append(deep.Descriptors[0].Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "x", Value: "y"})
		}
		for name, req := range map[string]*rlsv3.RateLimitRequest{"descriptors": many, "entries": deep} {
			resp := call(t, c, req)
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Errorf("shadow %v, too many %s: %v, want OVER_LIMIT", shadow, name, resp.OverallCode)
			}
			for i, st := range resp.Statuses {
				if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Errorf("shadow %v, too many %s: descriptor %d is %v", shadow, name, i, st.Code)
				}
			}
		}
		// Nothing was charged: the bucket still has all its 1000.
		resp := call(t, c, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc(u64(0), "k", "many")}})
		if left := resp.Statuses[0].LimitRemaining; left != 1000 {
			t.Errorf("shadow %v: %d left after over-bounds requests, want 1000", shadow, left)
		}
	}
}

// rawCodec sends []byte as the message as it is, for requests no
// generated client would build.
type rawCodec struct{ encoding.CodecV2 }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.([]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// TestOverBoundsMemory: a request of nearly MaxRequestBytes packed with
// empty descriptors (a million of them, which would decode into a few
// hundred MiB) is answered OVER_LIMIT while the whole call allocates a few
// times its bytes at most: the listener decodes MaxDescriptors+1 of them.
func TestOverBoundsMemory(t *testing.T) {
	rules, lims := rulesOf(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 1000}}]\n", nil)
	_, conn := rlsClient(t, Config{Rules: rules, Limiters: lims})
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, "d")
	empty := []byte{}
	empty = protowire.AppendTag(empty, fieldEntries, protowire.BytesType)
	empty = protowire.AppendBytes(empty, nil)
	for len(msg) < MaxRequestBytes-16 {
		msg = protowire.AppendTag(msg, fieldDescriptors, protowire.BytesType)
		msg = protowire.AppendBytes(msg, empty)
	}
	codec := rawCodec{encoding.GetCodecV2(proto.Name)}
	invoke := func() *rlsv3.RateLimitResponse {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp := new(rlsv3.RateLimitResponse)
		if err := conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", msg, resp, grpc.ForceCodecV2(codec)); err != nil {
			t.Fatalf("a %d-byte request of empty descriptors: %v, want a decision", len(msg), err)
		}
		return resp
	}
	invoke() // warm up the connection and the pools
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp := invoke()
	runtime.ReadMemStats(&after)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a request of %d empty descriptors: %v, want OVER_LIMIT", len(msg)/4, resp.OverallCode)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*MaxRequestBytes {
		t.Errorf("one call of %d bytes allocated %d MiB, want at most %d MiB", len(msg), alloc>>20, 8*MaxRequestBytes>>20)
	}
}

// TestTruncate: a request over the bounds is read with MaxDescriptors+1
// descriptors, MaxEntries+1 entries each, and its other fields as sent; one
// within them is read as it is.
func TestTruncate(t *testing.T) {
	big := &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3}
	for i := range MaxDescriptors + 5 {
		d := desc(u64(2), "k", "v")
		if i == 1 {
			for range MaxEntries + 5 {
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "x", Value: "y"})
			}
		}
		big.Descriptors = append(big.Descriptors, d)
	}
	b, err := encoding.GetCodecV2(proto.Name).Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	got := new(rlsv3.RateLimitRequest)
	if err := (boundedCodec{encoding.GetCodecV2(proto.Name)}).Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if got.Domain != "d" || got.HitsAddend != 3 || len(got.Descriptors) != MaxDescriptors+1 ||
		len(got.Descriptors[1].Entries) != MaxEntries+1 || got.Descriptors[1].GetHitsAddend().GetValue() != 2 || overBounds(got) == "" {
		t.Errorf("read %d descriptors, %d entries in the second, domain %q, hits %d: want %d, %d, d, 3, and over the bounds",
			len(got.Descriptors), len(got.Descriptors[1].Entries), got.Domain, got.HitsAddend, MaxDescriptors+1, MaxEntries+1)
	}
	if _, over := truncate(b.Materialize()); !over {
		t.Error("truncate did not find the request over the bounds")
	}
	small := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{big.Descriptors[0], big.Descriptors[2]}}
	sb, _ := encoding.GetCodecV2(proto.Name).Marshal(small)
	if _, over := truncate(sb.Materialize()); over {
		t.Error("a request within the bounds was truncated")
	}
}

// FuzzTruncate: on any bytes truncate never panics, and what it cuts is a
// request within one past each bound that keeps the fields it left alone.
func FuzzTruncate(f *testing.F) {
	many := &rlsv3.RateLimitRequest{Domain: "d"}
	for range MaxDescriptors + 2 {
		many.Descriptors = append(many.Descriptors, desc(nil, "k", "v"))
	}
	wide := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}
	for range MaxEntries + 2 {
		wide.Descriptors[0].Entries = append(wide.Descriptors[0].Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for _, m := range []*rlsv3.RateLimitRequest{many, wide, {Domain: "d"}} {
		b, err := pb.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x05, 0x0a})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, cut := truncate(b)
		if !cut {
			return
		}
		var req rlsv3.RateLimitRequest
		if err := pb.Unmarshal(out, &req); err != nil {
			var orig rlsv3.RateLimitRequest
			if pb.Unmarshal(b, &orig) == nil {
				t.Fatalf("a request that parsed was cut into one that does not: %v", err)
			}
			return
		}
		if len(req.Descriptors) > MaxDescriptors+1 {
			t.Fatalf("%d descriptors kept, want at most %d", len(req.Descriptors), MaxDescriptors+1)
		}
		for _, d := range req.Descriptors {
			if len(d.Entries) > MaxEntries+1 {
				t.Fatalf("%d entries kept, want at most %d", len(d.Entries), MaxEntries+1)
			}
		}
	})
}

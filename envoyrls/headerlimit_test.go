package envoyrls

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestHeaderListBound: Bounds.MaxHeaderBytes is the header list a call may
// send, counted as HTTP/2 counts it (each field's name and value and 32
// bytes), exactly: a call of that size is answered, one byte more is not.
// The client is raw HTTP/2, as Envoy is: it sends what it is given, where
// gRPC's own client would refuse to send.
func TestHeaderListBound(t *testing.T) {
	const max = 32 << 10
	rules, lims := rulesOf(t, "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1000}}]\n", nil)
	svc, err := New(Config{Rules: rules, Limiters: lims, Bounds: Bounds{MaxHeaderBytes: max}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, svc)
	fields := func(pad int) []hpack.HeaderField {
		return []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: "/grpc.health.v1.Health/Check"}, {Name: ":authority", Value: "x"},
			{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
			{Name: "x-pad", Value: strings.Repeat("a", pad)}}
	}
	size := func(fs []hpack.HeaderField) int {
		n := 0
		for _, f := range fs {
			n += int(f.Size())
		}
		return n
	}
	// answered sends a health check with fs and reports whether it was
	// answered with grpc-status 0.
	answered := func(fs []hpack.HeaderField) bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		c.Write([]byte(http2.ClientPreface))
		fr := http2.NewFramer(c, c)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings()
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, f := range fs {
			enc.WriteField(f)
		}
		b := hb.Bytes()
		for first := true; len(b) > 0; first = false {
			chunk := b[:min(len(b), 16<<10)]
			b = b[len(chunk):]
			if first {
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: chunk, EndHeaders: len(b) == 0})
			} else {
				fr.WriteContinuation(1, len(b) == 0, chunk)
			}
		}
		fr.WriteData(1, true, []byte{0, 0, 0, 0, 0}) // an empty HealthCheckRequest
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return false
			}
			switch f := f.(type) {
			case *http2.MetaHeadersFrame:
				for _, h := range f.Fields {
					if h.Name == "grpc-status" {
						return h.Value == "0"
					}
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.RSTStreamFrame, *http2.GoAwayFrame:
				return false
			}
		}
	}
	pad := max - size(fields(0))
	if got := size(fields(pad)); got != max {
		t.Fatalf("the header list is %d bytes, want %d", got, max)
	}
	if !answered(fields(pad)) {
		t.Errorf("a header list of exactly %d bytes was not answered", max)
	}
	if answered(fields(pad + 1)) {
		t.Errorf("a header list of %d bytes, over %d, was answered", max+1, max)
	}
}

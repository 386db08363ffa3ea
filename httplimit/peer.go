package httplimit

import (
	"net/http"
	"net/netip"
	"sync"

	"github.com/floodgate-go/floodgate/clientip"
)

// A PeerKeyer keys requests by client address for front ends that have no
// *http.Request (fasthttp, gRPC): from the connection's peer address and,
// only when the peer is a trusted proxy, the header that Config names. It
// keys exactly as KeyByIP over a clientip.Resolver of the same Config does.
// A PeerKeyer is safe for concurrent use.
type PeerKeyer struct {
	res    *clientip.Resolver
	header string // canonical; "" when no header is ever read
}

// NewPeerKeyer returns a PeerKeyer for cfg (see clientip.Config). Errors
// wrap clientip.ErrInvalidConfig.
func NewPeerKeyer(cfg clientip.Config) (*PeerKeyer, error) {
	res, err := clientip.New(cfg)
	if err != nil {
		return nil, err
	}
	k := &PeerKeyer{res: res}
	if len(cfg.TrustedProxies) > 0 || cfg.TrustedHops > 0 {
		k.header = clientip.HeaderXForwardedFor
		if cfg.Header != "" {
			k.header = cfg.Header
		}
		k.header = http.CanonicalHeaderKey(k.header)
	}
	return k, nil
}

// Header returns the name of the header a trusted proxy reports the client
// in, in canonical form, or "" when no proxy is trusted and Key ignores
// its lines.
func (k *PeerKeyer) Header() string { return k.header }

// Resolver returns the clientip.Resolver the keyer keys with, whose
// Malformed count tells whether the trusted proxies write what the config
// says.
func (k *PeerKeyer) Resolver() *clientip.Resolver { return k.res }

// Key returns the key of the client behind peer, with lines the lines of the
// Header field of the request (none when it has none). A zero peer (a Unix
// socket) keys as clientip.UnknownKey unless a trusted header names a
// client.
func (k *PeerKeyer) Key(peer netip.AddrPort, lines []string) string {
	if k.header == "" {
		return k.res.AddrKey(peer.Addr())
	}
	r := peerReqs.Get().(*http.Request)
	if peer.IsValid() {
		r.RemoteAddr = peer.String()
	} else {
		r.RemoteAddr = ""
	}
	if len(lines) > 0 {
		r.Header[k.header] = lines
	}
	key := k.res.Key(r)
	clear(r.Header)
	peerReqs.Put(r)
	return key
}

// peerReqs holds the requests that carry a peer and its header to the
// Resolver, which reads nothing else.
var peerReqs = sync.Pool{New: func() any { return &http.Request{Header: make(http.Header, 1)} }}

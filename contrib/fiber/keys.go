package fiberlimit

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"

	"github.com/floodgate-go/floodgate/clientip"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/gofiber/fiber/v3"
)

// peerKey keys requests by client address: through the trusted proxies of
// a clientip.Config, or, for the zero Config, those of each app's own
// configuration.
type peerKey struct {
	fixed *httplimit.PeerKeyer // nil: from the app's config
	byApp sync.Map             // *fiber.App → *httplimit.PeerKeyer
}

func newPeerKey(cfg clientip.Config) (*peerKey, error) {
	k := new(peerKey)
	if len(cfg.TrustedProxies) == 0 && cfg.TrustedHops == 0 && cfg.Header == "" && cfg.IPv6Prefix == 0 {
		return k, nil
	}
	pk, err := httplimit.NewPeerKeyer(cfg)
	if err != nil {
		return nil, err
	}
	k.fixed = pk
	return k, nil
}

func (k *peerKey) key(c fiber.Ctx) string {
	pk := k.fixed
	if pk == nil {
		pk = k.forApp(c.App())
	}
	var peer netip.AddrPort
	if a, ok := c.RequestCtx().RemoteAddr().(*net.TCPAddr); ok {
		peer = a.AddrPort()
	}
	var lines []string
	if name := pk.Header(); name != "" {
		for _, l := range c.Request().Header.PeekAll(name) {
			lines = append(lines, string(l))
		}
	}
	return pk.Key(peer, lines)
}

// forApp returns the keyer of app's trusted proxies, made once per app.
func (k *peerKey) forApp(app *fiber.App) *httplimit.PeerKeyer {
	if pk, ok := k.byApp.Load(app); ok {
		return pk.(*httplimit.PeerKeyer)
	}
	pk, err := httplimit.NewPeerKeyer(TrustedProxies(app.Config()))
	if err != nil {
		// Fiber accepted a proxy list clientip does not: trust no one
		// rather than a list read differently.
		pk, _ = httplimit.NewPeerKeyer(clientip.Config{})
	}
	v, _ := k.byApp.LoadOrStore(app, pk)
	return v.(*httplimit.PeerKeyer)
}

// TrustedProxies returns the clientip.Config of a Fiber app's trusted
// proxies, which fiberlimit keys by unless Config.ClientIP says otherwise:
// none unless cfg.TrustProxy is set and names a ProxyHeader; then the
// proxies of cfg.TrustProxyConfig (and the loopback, private and link-local
// ranges it enables), reporting the client in ProxyHeader. Unlike Fiber's
// c.IP(), X-Forwarded-For is walked from the right, past trusted proxies,
// so the client's own entries are never its key.
func TrustedProxies(cfg fiber.Config) clientip.Config {
	if !cfg.TrustProxy || cfg.ProxyHeader == "" {
		return clientip.Config{}
	}
	t := cfg.TrustProxyConfig
	proxies := append([]string(nil), t.Proxies...)
	if t.Loopback {
		proxies = append(proxies, "127.0.0.0/8", "::1/128")
	}
	if t.Private {
		proxies = append(proxies, "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
	}
	if t.LinkLocal {
		proxies = append(proxies, "169.254.0.0/16", "fe80::/10")
	}
	if len(proxies) == 0 {
		return clientip.Config{}
	}
	return clientip.Config{TrustedProxies: proxies, Header: cfg.ProxyHeader}
}

// headerTag is the prefix of ByHeader's keys: the header's name in lower
// case and a colon, as httplimit.KeyByHeader writes it.
func headerTag(name string) string { return strings.ToLower(http.CanonicalHeaderKey(name)) + ":" }

// keyByHeader keys as httplimit.KeyByHeader does: "<name>:<value>" from
// the header's first line, trimmed, or "ip:" and the client address.
func keyByHeader(name, tag string, get func(fiber.Ctx, string, ...string) string) func(fiber.Ctx) string {
	return func(c fiber.Ctx) string {
		if v := strings.TrimSpace(get(c, name)); v != "" {
			return tag + v
		}
		return "ip:" + ClientKey(c)
	}
}

// appPeers keys by the trusted proxies of each app's own configuration.
var appPeers = new(peerKey)

// ClientKey returns the key of c's client address, as the middleware keys
// a request by default: the connection's peer, or the address a trusted
// proxy of the app's configuration (fiber.Config TrustProxy,
// TrustProxyConfig, ProxyHeader; see TrustedProxies) reports, with IPv6
// clients grouped by /64. Use it in a KeyGenerator in place of c.IP(),
// which with TrustProxy and ProxyHeader set is the header verbatim, as
// any client may write it:
//
//	KeyGenerator: func(c fiber.Ctx) string {
//		if k := c.Get("X-API-Key"); k != "" {
//			return "key:" + k
//		}
//		return "ip:" + fiberlimit.ClientKey(c)
//	},
//
// A generator that only falls back to the client may return "" instead:
// the middleware keys such requests by their client itself.
func ClientKey(c fiber.Ctx) string { return appPeers.key(c) }

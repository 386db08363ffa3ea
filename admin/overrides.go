package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/webguard"
	"github.com/floodgate-go/floodgate/override"
)

// Overrides serves the runtime overrides of a Table:
//
//	GET    /v1/overrides[?policy=P]             the entries in force
//	PUT    /v1/overrides?policy=P&key=K         set one for a key (or &tier=T), body below
//	DELETE /v1/overrides?policy=P&key=K         remove it (or &tier=T)
//
// The body of a PUT is JSON or YAML: limits as the file's overrides write
// them ({"rate": "500/s", "burst": 1000} or {"limits": [...]}) or
// {"multiplier": 2}, with "ttl" (required, at most 90 days), and "by" and
// "reason" for the audit trail. Every change is logged with who, what and
// from where. Like /v1/keys, a key of none of the shapes the configuration
// makes is refused unless asked with any_shape.
type Overrides struct {
	Table *override.Table

	// Entry builds the entry a PUT asks for from its body, checked
	// against the policy in service: ErrUnknownPolicy (404) for a policy
	// not in service, any other error is the caller's (400).
	Entry func(ctx context.Context, id override.ID, body []byte) (override.Entry, error)
}

// ErrUnknownPolicy is Overrides.Entry's error for a policy not in service.
var ErrUnknownPolicy = errors.New("no such policy in service")

// maxOverrideBody bounds a PUT's body: limits, a ttl and two short texts.
const maxOverrideBody = 64 << 10

// An OverrideView is one entry as /v1/overrides shows it.
type OverrideView struct {
	Policy     string    `json:"policy"`
	Key        string    `json:"key,omitempty"`
	Tier       string    `json:"tier,omitempty"`
	Limits     []string  `json:"limits,omitempty"`
	Multiplier float64   `json:"multiplier,omitempty"`
	Expires    time.Time `json:"expires"`
	Created    time.Time `json:"created"`
	By         string    `json:"by,omitempty"`
	Reason     string    `json:"reason,omitempty"`
}

// ViewOf is e as the admin API and the status page show it.
func ViewOf(e override.Entry) OverrideView {
	v := OverrideView{Policy: e.Policy, Key: e.Key, Tier: e.Tier, Multiplier: e.Multiplier,
		Expires: e.Expires.UTC(), Created: e.Created.UTC(), By: e.By, Reason: e.Reason}
	for _, l := range e.Limits {
		v.Limits = append(v.Limits, l.String())
	}
	return v
}

// AnnotateOverride names in st the runtime override of t its limits come
// from, if any: /v1/keys and explain show it.
func AnnotateOverride(t *override.Table, st *KeyState) {
	if t == nil || st.LimitSet == "" {
		return
	}
	id, ok := override.ParseVariant(st.Policy, st.LimitSet)
	if !ok {
		return
	}
	if e, ok := t.Get(id); ok {
		v := ViewOf(e)
		st.RuntimeOverride = &v
	}
}

type overridesHandler struct {
	o    *Overrides
	keys *keys // the policies in service and their key shapes
	log  *slog.Logger
	raw  bool
}

func (h *overridesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		views := []OverrideView{}
		for _, e := range h.o.Table.Entries() {
			if p := q.Get("policy"); p == "" || p == e.Policy {
				views = append(views, ViewOf(e))
			}
		}
		webguard.WriteJSON(w, http.StatusOK, struct {
			Overrides []OverrideView `json:"overrides"`
		}{views})
		return
	}
	id := override.ID{Policy: q.Get("policy"), Key: q.Get("key"), Tier: q.Get("tier")}
	if id.Policy == "" || q.Has("key") == q.Has("tier") {
		writeError(w, http.StatusBadRequest, "give ?policy=NAME and one of &key=KEY or &tier=TIER, e.g. /v1/overrides?policy=api&key=user:42")
		return
	}
	if err := id.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// A DELETE needs no policy in service: an override of a policy a
	// reload removed is listed, and can be removed.
	if r.Method != http.MethodDelete && h.keys.policies()[id.Policy] == nil {
		writeError(w, http.StatusNotFound, h.keys.unknownPolicy(id.Policy))
		return
	}
	shown := id.Key
	if !h.raw {
		shown = floodgate.RedactKey(id.Key)
	}
	target := []any{"policy", id.Policy, "key", shown}
	if id.Tier != "" {
		target = []any{"policy", id.Policy, "tier", id.Tier}
	}
	switch r.Method {
	case http.MethodPut:
		if id.Key != "" && !q.Has("any_shape") {
			if msg := h.keys.shapeError(id.Policy, id.Key); msg != "" {
				writeError(w, http.StatusBadRequest, msg)
				return
			}
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOverrideBody))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, "the body is larger than 64 KiB; an override is limits, a ttl, by and reason")
			return
		}
		e, err := h.o.Entry(r.Context(), id, body)
		switch {
		case errors.Is(err, ErrUnknownPolicy):
			writeError(w, http.StatusNotFound, h.keys.unknownPolicy(id.Policy))
			return
		case err != nil:
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if e.By == "" {
			e.By = remoteIP(r)
		}
		if err := h.o.Table.Put(r.Context(), e); err != nil {
			h.answerStoreError(w, r, "set", err, target)
			return
		}
		what := "multiplier"
		var value any = e.Multiplier
		if len(e.Limits) > 0 {
			what, value = "limits", ViewOf(e).Limits
		}
		h.log.Info("runtime override set", append(target, what, value, "expires", e.Expires.UTC().Format(time.RFC3339),
			"by", e.By, "reason", e.Reason, "remote", r.RemoteAddr)...)
		webguard.WriteJSON(w, http.StatusOK, ViewOf(e))
	case http.MethodDelete:
		ok, err := h.o.Table.Delete(r.Context(), id)
		if err != nil {
			h.answerStoreError(w, r, "delete", err, target)
			return
		}
		if !ok {
			writeError(w, http.StatusNotFound, "no runtime override for "+id.String())
			return
		}
		h.log.Info("runtime override deleted", append(target, "remote", r.RemoteAddr)...)
		webguard.WriteJSON(w, http.StatusOK, struct {
			Deleted bool `json:"deleted"`
		}{true})
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "use GET to list the runtime overrides, PUT to set one, DELETE to remove one")
	}
}

func (h *overridesHandler) answerStoreError(w http.ResponseWriter, r *http.Request, verb string, err error, target []any) {
	switch {
	case errors.Is(err, override.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, override.ErrFull):
		writeError(w, http.StatusConflict, err.Error())
	default:
		h.log.Error("runtime override "+verb+" failed", append(target, "remote", r.RemoteAddr, "error", err)...)
		writeError(w, http.StatusServiceUnavailable, "the engine did not store the change: "+err.Error())
	}
}

// remoteIP is the caller's address without its port.
func remoteIP(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return strings.TrimSpace(r.RemoteAddr)
}

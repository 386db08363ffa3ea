package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/webguard"
	"github.com/floodgate-go/floodgate/status"
	"github.com/prometheus/client_golang/prometheus"
)

// keys serves key inspection (GET /v1/keys?policy=P&key=K) and reset
// (DELETE, the same query).
type keys struct {
	policies func() map[string]floodgate.Limiter
	shapes   func() map[string][]string
	recent   func(policy, key string) []status.Record
	runtime  *Overrides
	log      *slog.Logger
	raw      bool
	resets   *prometheus.CounterVec
}

// newKeys returns the key handler over cfg.Keys, counting resets as
// floodgate_key_resets_total{policy}.
func newKeys(cfg Config) (*keys, error) {
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	k := &keys{policies: cfg.Keys, shapes: cfg.KeyShapes, recent: cfg.Recent, runtime: cfg.Overrides, log: cfg.Logger, raw: cfg.RawKeys,
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "floodgate", Name: "key_resets_total",
			Help: "Keys reset (forgiven) through the admin API, by policy."}, []string{"policy"})}
	if k.log == nil {
		k.log = slog.Default()
	}
	if err := reg.Register(k.resets); err != nil {
		return nil, err
	}
	return k, nil
}

// A KeyState is what GET /v1/keys answers: the key's state under the limit
// that binds it now, read with a cost-0 peek that charges nothing.
type KeyState struct {
	Policy   string `json:"policy"`
	Key      string `json:"key"`      // as asked
	Redacted string `json:"redacted"` // the stand-in logs and the page show

	// Limited reports that the next request would be denied: nothing
	// remains under Limit.
	Limited bool `json:"limited"`

	Remaining int64    `json:"remaining"`
	Limit     string   `json:"limit"`               // the limit that binds the key now
	Limits    []string `json:"limits"`              // every limit that applies to the key
	LimitSet  string   `json:"limit_set,omitempty"` // override:KEY or tier:NAME, when not the defaults
	// RuntimeOverride is the override set at runtime that gives the key
	// its limits (LimitSet runtime:key:KEY or runtime:tier:TIER).
	RuntimeOverride   *OverrideView `json:"runtime_override,omitempty"`
	ResetAfterSeconds float64       `json:"reset_after_seconds"` // until the key is back to full capacity
	RetryAfterSeconds float64       `json:"retry_after_seconds"` // until a request would pass; 0 while one would
	Source            string        `json:"source"`

	Reset bool `json:"reset,omitempty"` // DELETE: the key was reset

	// Recent are the key's last decisions, oldest first, while it is
	// among the policy's top limited keys (see status.Status.Recent).
	Recent []status.Record `json:"recent,omitempty"`
}

// Inspect returns key's state under lim, read with a peek (cost 0) that
// charges nothing; Limited says whether a request of cost (at least 1)
// would be denied now. It is what GET /v1/keys and /v1/explain answer for
// each key.
func Inspect(ctx context.Context, lim floodgate.Limiter, key string, cost int64) (KeyState, error) {
	res, err := lim.AllowN(ctx, key, 0)
	if err != nil {
		return KeyState{}, err
	}
	st := KeyState{Policy: lim.Name(), Key: key, Redacted: floodgate.RedactKey(key), Remaining: res.Remaining, Source: string(res.Source),
		ResetAfterSeconds: res.ResetAfter.Seconds(), RetryAfterSeconds: seconds(res.RetryAfter)}
	if res.Set != nil {
		st.Limit = res.Limit.String()
		st.Limited = res.Remaining < max(cost, 1)
		st.LimitSet = res.Set.Variant()
		for i := range res.Set.Len() {
			st.Limits = append(st.Limits, res.Set.Limit(i).String())
		}
	}
	return st, nil
}

// unknownPolicy is the answer about a policy not in service.
func (k *keys) unknownPolicy(name string) string {
	names := slices.Sorted(maps.Keys(k.policies()))
	return "no policy " + quote(name) + " in service; the policies are: " + strings.Join(names, ", ")
}

// shapeError is the answer to a key that has none of the shapes the
// configuration makes for the policy, or "" when it has one (or the policy
// has no shapes to check).
func (k *keys) shapeError(policy, key string) string {
	if k.shapes == nil {
		return ""
	}
	shapes := k.shapes()[policy]
	if len(shapes) == 0 {
		return ""
	}
	for _, sh := range shapes {
		if ShapeMatches(sh, key) {
			return ""
		}
	}
	return "no front end makes a key like " + quote(key) + " under policy " + quote(policy) + ": its keys have the shapes " +
		strings.Join(shapes, ", ") + " ({address} is a client address, {value} any value); " +
		"floodgate explain shows the key of a described request, and floodgate key show -any-shape (any_shape=1) looks the key up as it is, for a key a check API caller sent"
}

func (k *keys) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, key := q.Get("policy"), q.Get("key")
	if name == "" || !q.Has("key") {
		writeError(w, http.StatusBadRequest, "give ?policy=NAME&key=KEY, e.g. /v1/keys?policy=api&key=user:42")
		return
	}
	lim := k.policies()[name]
	if lim == nil {
		writeError(w, http.StatusNotFound, k.unknownPolicy(name))
		return
	}
	if msg := k.shapeError(name, key); msg != "" && !q.Has("any_shape") {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	shown := floodgate.RedactKey(key)
	if k.raw {
		shown = key
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodDelete:
		if err := lim.Reset(r.Context(), key); err != nil {
			k.log.Error("key reset failed", "remote", r.RemoteAddr, "policy", name, "key", shown, "error", err)
			writeError(w, http.StatusBadGateway, "the engine did not reset the key: "+err.Error())
			return
		}
		k.resets.WithLabelValues(name).Inc()
		k.log.Info("key reset", "remote", r.RemoteAddr, "policy", name, "key", shown)
	default:
		w.Header().Set("Allow", "GET, HEAD, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "use GET to inspect a key or DELETE to reset it")
		return
	}
	st, err := Inspect(r.Context(), lim, key, 1)
	if err != nil {
		writeError(w, http.StatusBadGateway, "the engine did not answer: "+err.Error())
		return
	}
	st.Policy, st.Reset = name, r.Method == http.MethodDelete
	if k.runtime != nil {
		AnnotateOverride(k.runtime.Table, &st)
	}
	if k.recent != nil {
		st.Recent = k.recent(name, key)
	}
	webguard.WriteJSON(w, http.StatusOK, st)
}

// seconds is d in seconds, with RetryNever as -1: JSON has no infinity.
func seconds(d time.Duration) float64 {
	if d == floodgate.RetryNever {
		return -1
	}
	return d.Seconds()
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// An apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	webguard.WriteJSON(w, status, apiError{Error: msg})
}

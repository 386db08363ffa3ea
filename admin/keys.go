package admin

import (
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/prometheus/client_golang/prometheus"
)

// keys serves key inspection (GET /v1/keys?policy=P&key=K) and reset
// (DELETE, the same query).
type keys struct {
	policies func() map[string]floodgate.Limiter
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
	k := &keys{policies: cfg.Keys, log: cfg.Logger, raw: cfg.RawKeys,
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

	Remaining         int64    `json:"remaining"`
	Limit             string   `json:"limit"`               // the limit that binds the key now
	Limits            []string `json:"limits"`              // every limit that applies to the key
	LimitSet          string   `json:"limit_set,omitempty"` // override:KEY or tier:NAME, when not the defaults
	ResetAfterSeconds float64  `json:"reset_after_seconds"` // until the key is back to full capacity
	RetryAfterSeconds float64  `json:"retry_after_seconds"` // until a request would pass; 0 while one would
	Source            string   `json:"source"`

	Reset bool `json:"reset,omitempty"` // DELETE: the key was reset
}

func (k *keys) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, key := q.Get("policy"), q.Get("key")
	if name == "" || !q.Has("key") {
		writeError(w, http.StatusBadRequest, "give ?policy=NAME&key=KEY, e.g. /v1/keys?policy=api&key=user:42")
		return
	}
	policies := k.policies()
	lim := policies[name]
	if lim == nil {
		names := slices.Sorted(maps.Keys(policies))
		writeError(w, http.StatusNotFound, "no policy "+quote(name)+" in service; the policies are: "+strings.Join(names, ", "))
		return
	}
	redacted := floodgate.RedactKey(key)
	shown := redacted
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
	res, err := lim.AllowN(r.Context(), key, 0)
	if err != nil {
		writeError(w, http.StatusBadGateway, "the engine did not answer: "+err.Error())
		return
	}
	st := KeyState{Policy: name, Key: key, Redacted: redacted, Remaining: res.Remaining, Source: string(res.Source),
		ResetAfterSeconds: res.ResetAfter.Seconds(), RetryAfterSeconds: seconds(res.RetryAfter),
		Reset: r.Method == http.MethodDelete}
	if res.Set != nil {
		st.Limit = res.Limit.String()
		st.Limited = res.Remaining < 1
		st.LimitSet = res.Set.Variant()
		for i := range res.Set.Len() {
			st.Limits = append(st.Limits, res.Set.Limit(i).String())
		}
	}
	writeJSON(w, http.StatusOK, st)
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
	writeJSON(w, status, apiError{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

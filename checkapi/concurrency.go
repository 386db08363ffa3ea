package checkapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/httplimit"
)

// The paths of the concurrency lease endpoints.
const (
	AcquirePath = "/v1/concurrency/acquire"
	RenewPath   = "/v1/concurrency/renew"
	ReleasePath = "/v1/concurrency/release"
)

// A ConcurrencyLimit is a concurrency limit whose slots clients hold over
// the check API, as leases.
type ConcurrencyLimit struct {
	// Limiter holds the slots; its store decides whether they are this
	// process's or shared by every instance.
	Limiter *concurrency.Limiter

	// Lease is how long a slot is held after an acquire or a renewal, and
	// the longest ttl a request may ask for.
	Lease time.Duration
}

// leaseRequest is the body of the lease endpoints.
type leaseRequest struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Token string `json:"token"`
	TTL   string `json:"ttl"`
}

// serveLease answers the lease endpoints:
//
//	POST /v1/concurrency/acquire {"name": "reports", "key": "user:42", "ttl": "30s"}
//	  200 {"token": "…", "expires_in_ms": 30000, "in_flight": 1, "limit": 4}
//	  429 every slot of the key is held
//	  503 the store failed and its failure mode refuses (Retry-After, the
//	      seconds until its breaker tries the store again, unless
//	      Headers.DisableRetryAfter)
//	POST /v1/concurrency/renew {"name": "reports", "key": "user:42", "token": "…"}
//	  204 renewed for ttl (default the limit's lease) from now
//	  410 the lease ran out or was released; acquire a new one
//	POST /v1/concurrency/release {"name": "reports", "key": "user:42", "token": "…"}
//	  204 released (also when it was already released or ran out)
//
// A malformed body, an unknown name, an empty key, a token that is not of
// the form acquire hands out (32 lowercase hex digits) or a ttl that is
// not positive or longer than the limit's lease is a 400. A well-formed
// token that holds no slot (it ran out, was released, or was never handed
// out: no instance can tell these apart, leases being shared through the
// store) is a 410 on renew and a 204 on release, which frees nothing: a
// slot is freed only by its own token, 128 random bits.
func (c *API) serveLease(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, c.maxBody+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	}
	if int64(len(body)) > c.maxBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", c.maxBody))
		return
	}
	var q leaseRequest
	if err := decodeStrict(body, &q); err != nil {
		writeError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return
	}
	cl, ok := (*c.conc.Load())[q.Name]
	switch {
	case !ok:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown concurrency limit %q; name one of check.concurrency", q.Name))
		return
	case q.Key == "":
		writeError(w, http.StatusBadRequest, `give the key to hold a slot of ("key"), e.g. "user:42"`)
		return
	}
	ttl := cl.Lease
	if q.TTL != "" {
		d, err := time.ParseDuration(q.TTL)
		if err != nil || d <= 0 || d > cl.Lease {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("ttl %q: give a duration above 0 and at most the limit's lease, %s", q.TTL, cl.Lease))
			return
		}
		ttl = d
	}
	acquire := r.URL.Path == AcquirePath
	switch {
	case acquire && q.Token != "":
		writeError(w, http.StatusBadRequest, `acquire hands out a token; give "token" to renew or release`)
		return
	case !acquire && !validToken(q.Token):
		writeError(w, http.StatusBadRequest, `"token" is not of the form acquire hands out (32 lowercase hex digits); give the token of the lease`)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	defer cancel()
	lim := cl.Limiter
	switch r.URL.Path {
	case AcquirePath:
		res, lease := lim.AcquireLease(ctx, q.Key, ttl)
		if res.Allowed {
			b := append([]byte(`{"token":`), appendJSONString(nil, lease.Token)...)
			b = append(b, `,"expires_in_ms":`...)
			b = strconv.AppendInt(b, lease.TTL.Milliseconds(), 10)
			b = append(b, `,"in_flight":`...)
			b = strconv.AppendInt(b, int64(res.InFlight), 10)
			b = append(b, `,"limit":`...)
			b = strconv.AppendInt(b, int64(res.Limit), 10)
			b = append(b, "}\n"...)
			w.Header()["Content-Type"] = []string{"application/json"}
			w.WriteHeader(http.StatusOK)
			w.Write(b)
			return
		}
		if res.RetryAfter > 0 && !c.policies.Load().hdr.DisableRetryAfter {
			w.Header()["Retry-After"] = []string{strconv.FormatInt(httplimit.RetryAfterSeconds(res.RetryAfter), 10)}
		}
		if res.Reason == concurrency.ReasonFull {
			writeError(w, http.StatusTooManyRequests, fmt.Sprintf("all %d slots of the key are held; retry when one is released", res.Limit))
			return
		}
		c.errs.Error(r.Context(), "concurrency acquire: undecided", slog.String("name", q.Name), slog.Any("error", res.Err()))
		writeError(w, http.StatusServiceUnavailable, "no slot could be granted: "+res.Err().Error())
	case RenewPath:
		err := lim.RenewLease(ctx, concurrency.Lease{Key: q.Key, Token: q.Token, TTL: ttl})
		switch {
		case err == nil:
			w.WriteHeader(http.StatusNoContent)
		case errors.Is(err, concurrency.ErrLeaseLost):
			writeError(w, http.StatusGone, "the lease no longer holds a slot (it ran out or was released); acquire a new one")
		default:
			c.errs.Error(r.Context(), "concurrency renew: failed", slog.String("name", q.Name), slog.Any("error", err))
			writeError(w, http.StatusServiceUnavailable, "the lease could not be renewed: "+err.Error())
		}
	case ReleasePath:
		if err := lim.ReleaseLease(ctx, concurrency.Lease{Key: q.Key, Token: q.Token, TTL: ttl}); err != nil {
			c.errs.Error(r.Context(), "concurrency release: failed", slog.String("name", q.Name), slog.Any("error", err))
			writeError(w, http.StatusServiceUnavailable, "the lease could not be released (it runs out by itself): "+err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// decodeStrict decodes one JSON value from b into v, refusing unknown
// fields and trailing values.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one value in the body")
	}
	return nil
}

// validToken reports whether t has the form of the tokens AcquireLease
// hands out: 32 lowercase hexadecimal digits.
func validToken(t string) bool {
	if len(t) != 32 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// SetConcurrency replaces the concurrency limits clients hold leases of.
// The map must not be changed afterwards.
func (c *API) SetConcurrency(m map[string]ConcurrencyLimit) {
	c.conc.Store(&m)
}

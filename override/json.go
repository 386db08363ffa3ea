package override

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/textform"
)

// The form an Entry is kept in by a shared Store: exact (periods in
// nanoseconds, times in Unix nanoseconds), so that every instance reads
// back the limits that were put.
type wireEntry struct {
	Policy     string      `json:"policy"`
	Key        string      `json:"key,omitempty"`
	Tier       string      `json:"tier,omitempty"`
	Limits     []wireLimit `json:"limits,omitempty"`
	Multiplier float64     `json:"multiplier,omitempty"`
	Expires    int64       `json:"expires"`
	Created    int64       `json:"created"`
	By         string      `json:"by,omitempty"`
	Reason     string      `json:"reason,omitempty"`
}

type wireLimit struct {
	Rate      int64  `json:"rate"`
	Period    int64  `json:"period"`
	Burst     int64  `json:"burst,omitempty"`
	Algorithm string `json:"algorithm"`
	Align     string `json:"align,omitempty"`
}

// Marshal encodes e for a shared Store.
func Marshal(e Entry) ([]byte, error) {
	w := wireEntry{Policy: e.Policy, Key: e.Key, Tier: e.Tier, Multiplier: e.Multiplier,
		Expires: e.Expires.UnixNano(), Created: e.Created.UnixNano(), By: e.By, Reason: e.Reason}
	for _, l := range e.Limits {
		wl := wireLimit{Rate: l.Rate, Period: int64(l.Period), Burst: l.Burst, Algorithm: l.Algorithm.String()}
		if l.Location != nil {
			wl.Align = l.Location.String()
		}
		w.Limits = append(w.Limits, wl)
	}
	return json.Marshal(w)
}

// Unmarshal decodes what Marshal encoded and validates it (Entry.Validate):
// a shared store may hold anything anyone wrote.
func Unmarshal(b []byte) (Entry, error) {
	var w wireEntry
	if err := json.Unmarshal(b, &w); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	e := Entry{Policy: w.Policy, Key: w.Key, Tier: w.Tier, Multiplier: w.Multiplier,
		Expires: time.Unix(0, w.Expires), Created: time.Unix(0, w.Created), By: w.By, Reason: w.Reason}
	for _, wl := range w.Limits {
		a, ok := textform.Algorithm(wl.Algorithm)
		if !ok {
			return Entry{}, fmt.Errorf("%w: unknown algorithm %q", ErrInvalid, wl.Algorithm)
		}
		l := floodgate.Limit{Rate: wl.Rate, Period: time.Duration(wl.Period), Burst: wl.Burst, Algorithm: floodgate.Algorithm(a)}
		if wl.Align != "" {
			loc, err := time.LoadLocation(wl.Align)
			if err != nil {
				return Entry{}, fmt.Errorf("%w: align: %v", ErrInvalid, err)
			}
			l.Location = loc
		}
		e.Limits = append(e.Limits, l)
	}
	if err := e.Validate(); err != nil {
		return Entry{}, err
	}
	return e, nil
}

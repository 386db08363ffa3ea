package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/proxy"
)

// RunOptions configure Run.
type RunOptions struct {
	// Format is the log's format; "" means FormatAuto.
	Format Format
	// Parse says how lines are read (extra header fields).
	Parse Options
	// Peer is the peer address of requests whose line names none (an
	// Envoy line without X-Forwarded-For). Empty: such lines are counted
	// malformed, since they cannot be keyed by address.
	Peer string
	// Host is the Host of requests whose line names none (nginx's
	// combined format logs no host). Empty leaves them without one.
	Host string
	// Top is how many flipping keys the report lists; 0 means 10.
	Top int
	// RawKeys shows keys as they are; false shows floodgate.RedactKey's
	// stand-ins, as floodgate's logs do.
	RawKeys bool
	// Examples is how many malformed lines the report quotes; 0 means 5.
	Examples int
}

// Counts are the decisions of a route or a policy.
type Counts struct {
	// Requests is how many requests the route matched, or the policy was
	// among the limits of.
	Requests int64 `json:"requests"`
	// Allowed is how many of them the limits let through (for a policy:
	// its own answer, even when another limit of the route denied).
	Allowed int64 `json:"allowed"`
	// Denied is how many of them were refused (for a shadow route: would
	// have been; it forwards them). For a policy, the denials it gave.
	Denied int64 `json:"denied"`
	// Unchecked is, for a policy, how many requests another limit of the
	// route denied before this one was asked.
	Unchecked int64 `json:"unchecked,omitempty"`
}

// A Row is one route's or policy's counts under the candidate, and under
// the configuration it is compared with.
type Row struct {
	Name    string  `json:"name"`
	Shadow  bool    `json:"shadow,omitempty"`
	Counts          // the candidate's
	Against *Counts `json:"against,omitempty"`
	// Change is the candidate's counts minus Against's.
	Change *Counts `json:"change,omitempty"`
}

// A Flip is a key whose requests one configuration allows and the other
// denies, under the policy and route that denied them.
type Flip struct {
	Key    string `json:"key"`
	Policy string `json:"policy"`
	Route  string `json:"route"`
	// NewlyDenied are requests the candidate denies and the other
	// configuration allowed; NewlyAllowed the reverse.
	NewlyDenied  int64 `json:"newly_denied"`
	NewlyAllowed int64 `json:"newly_allowed"`
}

// A Report is what Run found.
type Report struct {
	Format    Format `json:"format"`
	Candidate string `json:"candidate"`
	Against   string `json:"against,omitempty"`
	Lines     int    `json:"lines"`
	Requests  int64  `json:"requests"`
	Malformed int64  `json:"malformed"`
	// MalformedBy counts malformed lines by reason.
	MalformedBy map[string]int64 `json:"malformed_by,omitempty"`
	// Examples quote the first malformed lines' errors.
	Examples []string `json:"malformed_examples,omitempty"`
	// Reordered counts requests logged with a time before a request
	// decided earlier: they are decided at that later time.
	Reordered int64    `json:"reordered,omitempty"`
	First     string   `json:"first,omitempty"`
	Last      string   `json:"last,omitempty"`
	Routes    []Row    `json:"routes"`
	Policies  []Row    `json:"policies"`
	Flips     []Flip   `json:"flips,omitempty"`
	Flipped   *Counts  `json:"flipped,omitempty"` // Denied: newly denied, Allowed: newly allowed
	FlipKeys  int      `json:"flip_keys,omitempty"`
	Notes     []string `json:"notes,omitempty"`
}

// Names of the route rows of requests no route decided.
const (
	NoRoute        = "(no route)"
	Unclean        = "(unclean path)"
	BadPath        = "(bad path: 400)" // refused before any route: neither allowed nor denied by a limit
	maxFlipTracked = 1 << 17
)

// side is one configuration's running totals.
type side struct {
	sim      *Sim
	routes   map[string]*Counts
	shadow   map[string]bool
	order    []string
	policies map[string]*Counts
}

func newSide(cfg *config.Config) (*side, error) {
	sim, err := NewSim(cfg)
	if err != nil {
		return nil, err
	}
	s := &side{sim: sim, routes: map[string]*Counts{}, shadow: map[string]bool{}, policies: map[string]*Counts{}}
	for i, r := range cfg.Proxy.Routes {
		name := r.Name
		if name == "" {
			name = fmt.Sprintf("route %d", i+1) // as the proxy names it
		}
		s.order = append(s.order, name)
		s.routes[name] = &Counts{}
		s.shadow[name] = r.Shadow
	}
	return s, nil
}

func (s *side) count(d *proxy.Evaluation) {
	name := d.Route
	switch {
	case d.BadPath != nil:
		name = BadPath
	case d.Redirect:
		name = Unclean
	case name == "":
		name = NoRoute
	}
	c := s.routes[name]
	if c == nil {
		c = &Counts{}
		s.routes[name] = c
		s.order = append(s.order, name)
	}
	c.Requests++
	switch {
	case d.BadPath != nil:
		// The proxy answers 400 whatever the limits: not a denial.
	case d.Status != 0:
		c.Denied++
	default:
		c.Allowed++
	}
	for i := range d.Checks {
		ch := &d.Checks[i]
		p := ch.Limiter.Name()
		pc := s.policies[p]
		if pc == nil {
			pc = &Counts{}
			s.policies[p] = pc
		}
		pc.Requests++
		switch res := &ch.Result; {
		case res.Source == "":
			pc.Unchecked++
		case res.Allowed:
			pc.Allowed++
		default:
			pc.Denied++
		}
	}
}

// denier is the policy and key that refused d.
func denier(d *proxy.Evaluation) (policy, key string) {
	for i := len(d.Checks) - 1; i >= 0; i-- {
		c := &d.Checks[i]
		if c.Result.Source != "" && !c.Result.Allowed {
			return c.Limiter.Name(), c.Key
		}
	}
	return d.Result.Policy, ""
}

// Run replays the log through candidate and, when against is not nil,
// through against too, each with its own engine and clock, and reports
// both and the difference. Lines that are not requests are counted, never
// fatal; an error is returned for a configuration that cannot be built, a
// log that cannot be read, or ctx ending.
func Run(ctx context.Context, log io.Reader, candidate, against *config.Config, o RunOptions) (*Report, error) {
	if o.Top <= 0 {
		o.Top = 10
	}
	if o.Examples <= 0 {
		o.Examples = 5
	}
	cand, err := newSide(candidate)
	if err != nil {
		return nil, err
	}
	defer cand.sim.Close()
	var ag *side
	if against != nil {
		if ag, err = newSide(against); err != nil {
			return nil, fmt.Errorf("against: %w", err)
		}
		defer ag.sim.Close()
	}
	rep := &Report{Candidate: candidate.File, MalformedBy: map[string]int64{}}
	if against != nil {
		rep.Against = against.File
		rep.Flipped = &Counts{}
	}
	type flipKey struct{ key, policy, route string }
	flips := map[flipKey]*Flip{}
	malformed := func(err error) {
		rep.Malformed++
		rep.MalformedBy[Reason(err)]++
		if len(rep.Examples) < o.Examples {
			rep.Examples = append(rep.Examples, err.Error())
		}
	}
	rd := NewReader(log, o.Format, o.Parse)
	var last int64
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		req, err := rd.Next()
		var le *LineError
		switch {
		case errors.Is(err, io.EOF):
		case errors.As(err, &le):
			malformed(err)
			continue
		case err != nil:
			return nil, err
		}
		if err != nil {
			break
		}
		if req.Peer == "" {
			req.Peer = o.Peer
		}
		if req.Host == "" {
			req.Host = o.Host
		}
		if req.Peer == "" {
			malformed(&LineError{Line: rd.Line(), Err: bad(rd.Format(), "no peer address: the line names no client; give -peer (the address the requests come from)")})
			continue
		}
		dc, err := cand.sim.Evaluate(ctx, &req)
		if err != nil {
			malformed(&LineError{Line: rd.Line(), Err: bad(rd.Format(), "%v", err)})
			continue
		}
		var da proxy.Evaluation
		if ag != nil {
			if da, err = ag.sim.Evaluate(ctx, &req); err != nil {
				// The same request was built for the candidate: only a
				// configuration-level failure gets here.
				return nil, fmt.Errorf("against: %w", err)
			}
		}
		rep.Requests++
		t := req.Time.UnixNano()
		if t < last {
			rep.Reordered++
		} else {
			last = t
		}
		if rep.First == "" {
			rep.First = timeOf(req.Time)
		}
		rep.Last = timeOf(req.Time)
		cand.count(&dc)
		if ag == nil {
			continue
		}
		ag.count(&da)
		cDenied, aDenied := dc.Status != 0 && dc.BadPath == nil, da.Status != 0 && da.BadPath == nil
		if cDenied == aDenied {
			continue
		}
		by, route := &dc, dc.Route
		if aDenied {
			by, route = &da, da.Route
			rep.Flipped.Allowed++
		} else {
			rep.Flipped.Denied++
		}
		policy, key := denier(by)
		if !o.RawKeys && key != "" {
			key = floodgate.RedactKey(key)
		}
		fk := flipKey{key, policy, route}
		f := flips[fk]
		if f == nil {
			if len(flips) >= maxFlipTracked {
				continue
			}
			f = &Flip{Key: key, Policy: policy, Route: route}
			flips[fk] = f
		}
		if aDenied {
			f.NewlyAllowed++
		} else {
			f.NewlyDenied++
		}
	}
	rep.Lines = rd.Line()
	rep.Format = rd.Format()
	if rep.Format == FormatAuto {
		rep.Format = "" // an empty log
	}
	rep.Routes = rows(cand, ag, cand.routes, func(s *side) map[string]*Counts { return s.routes }, order(cand, ag))
	rep.Policies = rows(cand, ag, cand.policies, func(s *side) map[string]*Counts { return s.policies }, policyNames(cand, ag))
	for _, f := range flips {
		rep.Flips = append(rep.Flips, *f)
	}
	rep.FlipKeys = len(rep.Flips)
	sort.Slice(rep.Flips, func(i, j int) bool {
		a, b := rep.Flips[i], rep.Flips[j]
		if na, nb := a.NewlyDenied+a.NewlyAllowed, b.NewlyDenied+b.NewlyAllowed; na != nb {
			return na > nb
		}
		return a.Key+a.Policy+a.Route < b.Key+b.Policy+b.Route
	})
	if len(rep.Flips) > o.Top {
		rep.Flips = rep.Flips[:o.Top]
	}
	if len(flips) >= maxFlipTracked {
		rep.Notes = append(rep.Notes, fmt.Sprintf("more than %d keys flipped; the top list counts the first %d seen", maxFlipTracked, maxFlipTracked))
	}
	if rep.Reordered > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d requests were logged before a request already decided; they were decided at that later time", rep.Reordered))
	}
	if len(rep.MalformedBy) == 0 {
		rep.MalformedBy = nil
	}
	return rep, nil
}

func order(cand, ag *side) []string {
	names := slices.Clone(cand.order)
	if ag != nil {
		for _, n := range ag.order {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	// The rows of undecided requests go last.
	slices.SortStableFunc(names, func(a, b string) int {
		rank := func(s string) int {
			if s == NoRoute || s == Unclean || s == BadPath {
				return 1
			}
			return 0
		}
		return rank(a) - rank(b)
	})
	return names
}

func policyNames(cand, ag *side) []string {
	var names []string
	for n := range cand.policies {
		names = append(names, n)
	}
	if ag != nil {
		for n := range ag.policies {
			if _, ok := cand.policies[n]; !ok {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}

func rows(cand, ag *side, own map[string]*Counts, of func(*side) map[string]*Counts, names []string) []Row {
	out := make([]Row, 0, len(names))
	for _, n := range names {
		r := Row{Name: n, Shadow: cand.shadow[n]}
		if c := own[n]; c != nil {
			r.Counts = *c
		}
		if ag != nil {
			a := Counts{}
			if c := of(ag)[n]; c != nil {
				a = *c
			}
			r.Against = &a
			r.Change = &Counts{Requests: r.Requests - a.Requests, Allowed: r.Allowed - a.Allowed,
				Denied: r.Denied - a.Denied, Unchecked: r.Unchecked - a.Unchecked}
		}
		out = append(out, r)
	}
	return out
}

// WriteText writes the report as tables.
func (r *Report) WriteText(w io.Writer) error {
	format := string(r.Format)
	if format == "" {
		format = "empty"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "replayed %d requests (%d lines, %s format, %d malformed)", r.Requests, r.Lines, format, r.Malformed)
	if r.First != "" {
		fmt.Fprintf(&b, " from %s to %s", r.First, r.Last)
	}
	fmt.Fprintf(&b, "\ncandidate: %s\n", r.Candidate)
	if r.Flipped != nil {
		fmt.Fprintf(&b, "against:   %s\n", r.Against)
	}
	table := func(title string, rows []Row, policy bool) {
		head := []string{title, "requests", "allowed", "denied"}
		if policy {
			head = append(head, "unchecked")
		}
		if r.Flipped != nil {
			head = append(head, "Δallowed", "Δdenied")
		}
		cells := [][]string{head}
		for _, row := range rows {
			name := row.Name
			if row.Shadow {
				name += " (shadow)"
			}
			c := []string{name, fmt.Sprint(row.Requests), fmt.Sprint(row.Allowed), fmt.Sprint(row.Denied)}
			if policy {
				c = append(c, fmt.Sprint(row.Unchecked))
			}
			if row.Change != nil {
				c = append(c, signed(row.Change.Allowed), signed(row.Change.Denied))
			}
			cells = append(cells, c)
		}
		b.WriteByte('\n')
		writeTable(&b, cells, 1)
	}
	table("route", r.Routes, false)
	table("policy", r.Policies, true)
	if r.Flipped != nil {
		fmt.Fprintf(&b, "\n%d requests newly denied, %d newly allowed, by %d keys", r.Flipped.Denied, r.Flipped.Allowed, r.FlipKeys)
		if len(r.Flips) > 0 {
			fmt.Fprintf(&b, "; the top %d:\n", len(r.Flips))
			cells := [][]string{{"key", "policy", "route", "newly denied", "newly allowed"}}
			for _, f := range r.Flips {
				key := f.Key
				if key == "" {
					key = "-"
				}
				cells = append(cells, []string{key, f.Policy, f.Route, fmt.Sprint(f.NewlyDenied), fmt.Sprint(f.NewlyAllowed)})
			}
			writeTable(&b, cells, 3)
		} else {
			b.WriteByte('\n')
		}
	}
	if r.Malformed > 0 {
		fmt.Fprintf(&b, "\n%d malformed lines (counted, not replayed):\n", r.Malformed)
		reasons := make([]string, 0, len(r.MalformedBy))
		for k := range r.MalformedBy {
			reasons = append(reasons, k)
		}
		sort.Strings(reasons)
		for _, k := range reasons {
			fmt.Fprintf(&b, "  %6d  %s\n", r.MalformedBy[k], k)
		}
		for _, e := range r.Examples {
			fmt.Fprintf(&b, "  e.g. %s\n", e)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable writes cells in columns two spaces apart: the first left
// columns aligned left, the others (numbers) right.
func writeTable(b *strings.Builder, cells [][]string, left int) {
	var width []int
	for _, row := range cells {
		for i, c := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range cells {
		var line strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				line.WriteString("  ")
			}
			if i < left {
				line.WriteString(c + pad)
			} else {
				line.WriteString(pad + c)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}

func signed(n int64) string {
	if n > 0 {
		return fmt.Sprintf("+%d", n)
	}
	return fmt.Sprint(n)
}

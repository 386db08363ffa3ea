package httplimit

import "github.com/floodgate-go/floodgate"

// Checked returns how many limits the verdict checked the request against:
// the rules that applied to it (Match, LimiterFor and SkipNoKey leave
// theirs out), in the order CheckOf and ResultOf index them.
func (v *Verdict) Checked() int { return v.cs.n }

// CheckOf returns check i as decided: its limiter, the key and cost
// charged, and its own Result (ResultOf). A tool that accounts decisions
// per policy and key (floodgate replay) reads them here, so that it keys
// requests exactly as the rules did.
func (v *Verdict) CheckOf(i int) floodgate.Check {
	c := v.cs.c[i]
	c.Result = v.ResultOf(i)
	return c
}

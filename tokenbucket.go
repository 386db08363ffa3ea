package floodgate

// TokenBucket runs GCRA's state transition. A token bucket with capacity B
// refilled at one token per T holds, at instant now, exactly
// B − (TAT − now)/T tokens, where TAT is GCRA's theoretical arrival time:
// taking n tokens is moving TAT by n×T, and a refill is time passing. Keeping
// the timestamp rather than (tokens, last refill) needs one integer instead
// of two and no refill arithmetic, and it cannot drift. The constant exists
// so configurations can say what they mean.

package concurrency

// Waiting returns the number of requests in l's queues.
func Waiting(l *Limiter) int { return int(l.waiting.Load()) }

// Package envoyrules is the envoyproxy/ratelimit rule file format and its
// matcher: the files an Envoy rate limit service is configured with load as
// they are, each descriptor rule compiled into floodgate limits, and a
// request's descriptors matched to their rules the way envoyproxy/ratelimit
// matches them, replaces included. The daemon's Envoy front end decides on
// what Match and MatchRequest return; `floodgate validate` reports a file's
// problems as file:line:column through Compile.
package envoyrules

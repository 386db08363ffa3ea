package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/override"
)

func overrideEntry(key string, expires time.Time) override.Entry {
	return override.Entry{Policy: "api", Key: key, Limits: []floodgate.Limit{floodgate.PerMinute(5)},
		Created: expires.Add(-time.Hour), Expires: expires, By: "alice"}
}

// TestOverridesStore: entries put by one store are listed by another on
// the same Redis with their version moved on; a field that does not
// decode, or holds an entry under another field's name, and an entry
// expired more than a minute ago, are skipped and deleted as the list is
// read.
func TestOverridesStore(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	a, err := NewOverrides(c, "fg:")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewOverrides(newClient(t, c.Options().Addr), "fg:")
	v0, err := b.Version(ctx)
	if err != nil || v0 != 0 {
		t.Fatalf("Version of an empty store = %d, %v", v0, err)
	}
	live := overrideEntry("user:42", time.Now().Add(time.Hour))
	if err := a.Put(ctx, live); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, overrideEntry("old", time.Now().Add(-2*time.Minute))); err != nil {
		t.Fatal(err)
	}
	c.HSet(ctx, "fg:{overrides}", "api\x00k\x00junk", "not json", "api\x00k\x00other", mustMarshal(t, live))
	v1, _ := b.Version(ctx)
	if v1 == v0 {
		t.Fatalf("Version did not move: %d then %d", v0, v1)
	}
	list, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Key != "user:42" || list[0].Limits[0] != floodgate.PerMinute(5) || list[0].By != "alice" {
		t.Fatalf("List = %+v, want the one live entry", list)
	}
	if n, _ := c.HLen(ctx, "fg:{overrides}").Result(); n != 1 {
		t.Fatalf("%d fields left, want 1: the expired one and those that do not decode deleted", n)
	}
	if ok, err := b.Delete(ctx, live.ID()); err != nil || !ok {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if ok, _ := b.Delete(ctx, live.ID()); ok {
		t.Fatal("a second Delete found the entry")
	}
}

func mustMarshal(t *testing.T, e override.Entry) string {
	b, err := override.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOverridesStoreBound: a full hash refuses a new entry (after dropping
// none, as none expired) but replaces an existing one.
func TestOverridesStoreBound(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	s, _ := NewOverrides(c, "")
	exp := time.Now().Add(time.Hour)
	p := c.Pipeline()
	for i := range override.MaxEntries {
		e := overrideEntry(fmt.Sprint("k", i), exp)
		p.HSet(ctx, "{overrides}", field(e.ID()), mustMarshal(t, e))
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, overrideEntry("new", exp)); !errors.Is(err, override.ErrFull) {
		t.Fatalf("Put into a full store = %v, want ErrFull", err)
	}
	if err := s.Put(ctx, overrideEntry("k7", exp.Add(time.Minute))); err != nil {
		t.Fatalf("replacing an entry of a full store: %v", err)
	}
}

// TestOverridesVersionAfterDataLoss: a Redis that lost its data and took
// as many changes since still shows a table a new version, so the table
// reads the new list rather than keeping the lost one.
func TestOverridesVersionAfterDataLoss(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	s, _ := NewOverrides(c, "")
	table := override.NewTable(s, override.Options{})
	exp := time.Now().Add(time.Hour)
	if err := table.Put(ctx, overrideEntry("before", exp)); err != nil {
		t.Fatal(err)
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, overrideEntry("after", exp)); err != nil {
		t.Fatal(err)
	}
	if err := table.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if es := table.Entries(); len(es) != 1 || es[0].Key != "after" {
		t.Fatalf("entries after the data loss: %+v, want the one put since", es)
	}
}

// TestOverridesHousekeepingKeepsAFreshPut: an expired entry that another
// instance replaces between the listing's read and its clean-up stays:
// the clean-up deletes only what still holds the value it read.
func TestOverridesHousekeepingKeepsAFreshPut(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	s, _ := NewOverrides(c, "")
	other, _ := NewOverrides(newClient(t, c.Options().Addr), "")
	if err := s.Put(ctx, overrideEntry("user:42", time.Now().Add(-2*time.Minute))); err != nil {
		t.Fatal(err)
	}
	c.AddHook(afterHGetAll{func() {
		if err := other.Put(ctx, overrideEntry("user:42", time.Now().Add(time.Hour))); err != nil {
			t.Error(err)
		}
	}})
	if _, err := s.List(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := other.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || time.Until(list[0].Expires) < 59*time.Minute {
		t.Fatalf("after the clean-up: %+v, want the fresh entry", list)
	}
}

// afterHGetAll runs f once, right after the client's first HGETALL.
type afterHGetAll struct{ f func() }

func (h afterHGetAll) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h afterHGetAll) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h afterHGetAll) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	done := false
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "hgetall" && !done {
			done = true
			h.f()
		}
		return err
	}
}

// TestOverridesForeignVersion: a version key that holds no number still
// tells a change.
func TestOverridesForeignVersion(t *testing.T) {
	c := standalone(t)
	ctx := context.Background()
	s, _ := NewOverrides(c, "")
	c.Set(ctx, "{overrides}:version", "not a number", 0)
	v1, err := s.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "{overrides}:version", "something else", 0)
	if v2, err := s.Version(ctx); err != nil || v2 == v1 {
		t.Fatalf("Version = %d, %v after the key changed (was %d)", v2, err, v1)
	}
}

package daemon

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A configuration file written over a running daemon's with 40,000 nested
// brackets in an x- field (a 40 KB file) is refused at the line where it
// nests too deeply, without the parser's memory (which grew to gigabytes),
// and the daemon keeps serving the configuration it had.
func TestReloadRefusesTooDeepAFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "floodgate.yaml")
	write(t, path, watchConfig("1/s"))
	w, ch := startWatch(t, path)
	d, err := New(w.Config(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	hostile := append(watchConfig("2/s"), "x-junk: "+strings.Repeat("[", 40_000)+"\n"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	replace(t, path, hostile)
	r := next(t, ch)
	runtime.ReadMemStats(&after)
	if r.err == nil {
		t.Fatal("the file was accepted")
	}
	d.ReloadFailed(r.err)
	if want := path + ":4:72: nested more than 64 levels"; !strings.Contains(r.err.Error(), want) {
		t.Errorf("error %q, want %q", r.err, want)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
		t.Errorf("refusing it allocated %d MB, want under 32", n>>20)
	}
	if got := d.Config().Policies["api"].Rate.String(); got != "1/s" {
		t.Errorf("the daemon runs rate %s, want the old 1/s", got)
	}
	if got := w.Config().Policies["api"].Rate.String(); got != "1/s" {
		t.Errorf("the watcher holds rate %s, want the old 1/s", got)
	}
}

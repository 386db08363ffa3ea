package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/internal/yamlpos"
	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long the watcher waits after the last change in a
// watched directory before it reloads: editors and Kubernetes change a
// file in several steps (write, rename, symlink swap), and one reload
// should see the result, not a step.
const DefaultDebounce = 100 * time.Millisecond

// A Watcher reloads a configuration file when it, or a file it refers to
// (Envoy configurations, secret files), changes.
//
// It watches the directories that hold those files rather than the files,
// so that it sees editors that save by renaming a new file over the old
// one and Kubernetes ConfigMaps, whose files are symlinks into a "..data"
// directory that is swapped as a whole. The callback runs only when the
// bytes of some file changed since the last load, valid or not.
type Watcher struct {
	path     string
	fn       func(*config.Config, error)
	debounce time.Duration
	fsw      *fsnotify.Watcher
	reload   chan struct{}
	done     chan struct{}

	mu      sync.Mutex
	current *config.Config
	digest  string
	files   []string // the files the last load read, missing ones included
	dirs    map[string]bool
}

// Watch loads the file at path and watches it until ctx is done. The
// initial load must succeed (its error is returned, an Errors). Later, fn
// receives either a changed configuration (and a nil error) or an error
// (and a nil configuration): the changed file is invalid, so the caller
// keeps serving the old one, or watching itself failed. Calls to fn are
// sequential, on the watcher's goroutine.
func Watch(ctx context.Context, path string, fn func(*config.Config, error)) (*Watcher, error) {
	c, files, err := config.LoadFiles(path)
	if err != nil {
		return nil, err
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		path:     path,
		fn:       fn,
		debounce: DefaultDebounce,
		fsw:      fsw,
		reload:   make(chan struct{}, 1),
		done:     make(chan struct{}),
		current:  c,
		digest:   config.DigestOf(files),
		files:    keysOf(files),
		dirs:     map[string]bool{},
	}
	if err := w.watchDirs(files); err != nil {
		fsw.Close()
		return nil, err
	}
	go w.run(ctx)
	return w, nil
}

// Config returns the configuration most recently loaded without error.
func (w *Watcher) Config() *config.Config {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Reload asks for the file to be read again now, as on SIGHUP. It calls back
// with the new configuration or its error when the content changed, and
// with (nil, nil) when it did not.
func (w *Watcher) Reload() {
	select {
	case w.reload <- struct{}{}:
	default: // one reload is already pending, and will read the latest bytes
	}
}

// maxDelay is the longest a check waits after the first event of a burst.
func (w *Watcher) maxDelay() time.Duration { return 10 * w.debounce }

// Done is closed when the watcher has stopped (its context ended).
func (w *Watcher) Done() <-chan struct{} { return w.done }

func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	defer w.fsw.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time // the first event since the last check
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case _, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			// Any event in a watched directory may concern one of our
			// files (through a symlink, a rename); the digest decides.
			// Each event puts the check off by debounce, but no further
			// than maxDelay after the first: a file written without pause
			// in the same directory (a log) must not put it off for ever.
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			timer.Reset(min(w.debounce, max(first.Add(w.maxDelay()).Sub(now), 0)))
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.fn(nil, errors.Join(errors.New("watching the configuration for changes"), err))
		case <-w.reload:
			timer.Stop()
			first = time.Time{}
			w.check(true)
		case <-timer.C:
			first = time.Time{}
			w.check(false)
		}
	}
}

// check reads the files again and calls back when their content changed;
// asked for (Reload), it calls back with neither a configuration nor an
// error when nothing changed, so that the caller can say so.
//
// The files of the last load are read and hashed first, and parsed only
// when their bytes changed: a directory that also holds a busy file (a
// log, a socket) sends events all the time, and parsing a large
// configuration on each would cost the daemon a core and its memory.
// Whatever the files refer to is named in their bytes, so bytes unchanged
// mean a load unchanged.
func (w *Watcher) check(asked bool) {
	w.mu.Lock()
	last, lastDigest := w.files, w.digest
	w.mu.Unlock()
	if config.DigestOf(readAll(last)) == lastDigest {
		unchangedChecks.Add(1)
		if asked {
			w.fn(nil, nil)
		}
		return
	}
	c, files, err := config.LoadFiles(w.path)
	d := config.DigestOf(files)
	w.mu.Lock()
	changed := d != w.digest
	w.digest, w.files = d, keysOf(files)
	if changed && err == nil {
		w.current = c
	}
	w.mu.Unlock()
	werr := w.watchDirs(files)
	switch {
	case changed:
		w.fn(c, err)
	case asked:
		w.fn(nil, nil)
	}
	if werr != nil {
		w.fn(nil, werr)
	}
}

// watchDirs adds the directories of files to the watch list. Directories
// no longer needed stay watched; an event there costs one read.
func (w *Watcher) watchDirs(files map[string][]byte) error {
	var dirs []string
	for f := range files {
		dirs = append(dirs, filepath.Dir(f))
		// A symlink's target may live elsewhere; watch there too, so that
		// writes to the target are seen, not only a replaced link.
		if real, err := filepath.EvalSymlinks(f); err == nil && filepath.Dir(real) != filepath.Dir(f) {
			dirs = append(dirs, filepath.Dir(real))
		}
	}
	var errs []error
	for _, dir := range dirs {
		w.mu.Lock()
		seen := w.dirs[dir]
		w.mu.Unlock()
		if seen {
			continue
		}
		if err := w.fsw.Add(dir); err != nil {
			errs = append(errs, fmt.Errorf("cannot watch %s for changes: %w", dir, err))
			continue
		}
		w.mu.Lock()
		w.dirs[dir] = true
		w.mu.Unlock()
	}
	return errors.Join(errs...)
}

// unchangedChecks counts the checks that found the bytes unchanged and
// parsed nothing; tests read it.
var unchangedChecks atomic.Int64

// readAll reads files as config.LoadFiles records them: each file's bytes,
// nil for one that cannot be read.
func readAll(files []string) map[string][]byte {
	m := make(map[string][]byte, len(files))
	for _, f := range files {
		b, err := yamlpos.ReadFile(f)
		if err != nil {
			b = nil
		}
		m[f] = b
	}
	return m
}

func keysOf(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	return names
}

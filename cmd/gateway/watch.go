package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/hookgate/hookgate/config"
	"github.com/hookgate/hookgate/transform"
)

// defaultWatchDebounce is how long `serve --watch` waits after the last
// change before it reloads: a Kubernetes volume update is a burst of
// events (a new timestamped directory, the ..data symlink swap, the old
// directory removed), and an editor's save is often two or three.
const defaultWatchDebounce = 250 * time.Millisecond

// dataLink is the symlink Kubernetes swaps atomically in a ConfigMap or
// Secret volume: every file of the volume is a symlink through it, so a
// change shows up as an event on ..data, never on the file's own name.
const dataLink = "..data"

// watchedSet is what `serve --watch` watches: the config file and the
// files it references. reload files change the config in force; start
// files (the CA, upstream.ca_file, the admin token) are read only at start,
// so a change to them is reported, not applied.
type watchedSet struct {
	reload []string
	start  []string
}

// dirs are the directories to watch, and the names in each that matter.
func (ws watchedSet) dirs() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, f := range append(slices.Clone(ws.reload), ws.start...) {
		dir, base := filepath.Split(f)
		dir = filepath.Clean(dir)
		if out[dir] == nil {
			out[dir] = map[string]bool{dataLink: true}
		}
		out[dir][base] = true
	}
	return out
}

// referencedFiles loads the config file as a reload would, recording the
// ${file:} secrets it reads, and returns every file it depends on. A
// config that does not load yields only itself: the next good version
// names its files again.
func referencedFiles(file string) watchedSet {
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	ws := watchedSet{reload: []string{abs(file)}}
	var secrets []string
	readFile := func(path string) ([]byte, error) {
		secrets = append(secrets, abs(path))
		return os.ReadFile(path)
	}
	cfg, err := config.Load(file, config.Options{Transform: transform.Options{ReadFile: readFile}})
	if err != nil {
		return ws
	}
	ws.reload = append(ws.reload, secrets...)
	for _, f := range []string{cfg.CACertFile, cfg.CAKeyFile, cfg.UpstreamCAFile, cfg.AdminTokenFile} {
		if f != "" {
			ws.start = append(ws.start, abs(f))
		}
	}
	return ws
}

// fingerprint is a digest of the files' contents (a missing or unreadable
// file counts as such), so that a burst of events that changes nothing
// (a touch, a volume refresh with the same data) reloads nothing.
func fingerprint(files []string) [32]byte {
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f))
		data, err := os.ReadFile(f)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			h.Write([]byte{0})
		case err != nil:
			h.Write([]byte{1})
		default:
			h.Write([]byte{2})
			h.Write(data)
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// configWatcher reloads the gateway when the config file, or a file it
// references, changes.
type configWatcher struct {
	file     string
	debounce time.Duration
	reload   func(context.Context) error
	log      zerolog.Logger

	w       *fsnotify.Watcher
	set     watchedSet
	dirs    map[string]map[string]bool
	applied [32]byte // fingerprint of set.reload when last loaded
	started [32]byte // fingerprint of set.start at start
}

// startWatch watches file and what it references until stop is called;
// reload is the same entry point as SIGHUP's. stop returns once the
// watcher is gone.
func startWatch(file string, debounce time.Duration, reload func(context.Context) error, log zerolog.Logger) (stop func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	cw := &configWatcher{file: file, debounce: debounce, reload: reload, log: log.With().Str("component", "watch").Logger(), w: w}
	cw.set = referencedFiles(file)
	cw.applied, cw.started = fingerprint(cw.set.reload), fingerprint(cw.set.start)
	if err := cw.watchDirs(); err != nil {
		_ = w.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cw.run(ctx)
	}()
	return func() { cancel(); <-done }, nil
}

// watchDirs watches the directories of the current set (adding new ones,
// dropping those no longer needed). Watching the directory, not the file,
// is what sees an atomic replacement: a rename over the file, or a swap
// of the ..data symlink, leaves a watch on the old file's inode blind.
func (cw *configWatcher) watchDirs() error {
	want := cw.set.dirs()
	for dir := range want {
		if _, ok := cw.dirs[dir]; ok {
			continue
		}
		if err := cw.w.Add(dir); err != nil {
			if dir == filepath.Dir(cw.set.reload[0]) {
				return err // the config file's own directory: nothing to watch
			}
			cw.log.Warn().Str("dir", dir).Err(err).Msg("cannot watch a directory of a referenced file; changes there need SIGHUP")
		}
	}
	for dir := range cw.dirs {
		if _, ok := want[dir]; !ok {
			_ = cw.w.Remove(dir)
		}
	}
	cw.dirs = want
	cw.log.Info().Strs("files", append(slices.Clone(cw.set.reload), cw.set.start...)).Msg("watching the config and the files it references")
	return nil
}

// relevant reports whether an event may change a watched file.
func (cw *configWatcher) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	dir, base := filepath.Split(ev.Name)
	return cw.dirs[filepath.Clean(dir)][base]
}

func (cw *configWatcher) run(ctx context.Context) {
	defer cw.w.Close()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case ev, ok := <-cw.w.Events:
			if !ok {
				return
			}
			if cw.relevant(ev) {
				timer.Reset(cw.debounce)
			}
		case err, ok := <-cw.w.Errors:
			if !ok {
				return
			}
			cw.log.Warn().Err(err).Msg("file watch error")
			timer.Reset(cw.debounce) // events may have been lost: look again
		case <-timer.C:
			cw.settled(ctx)
		}
	}
}

// settled runs once the files have been quiet for the debounce interval:
// it reloads when a file the config depends on has changed, and then
// follows the files the new config references.
func (cw *configWatcher) settled(ctx context.Context) {
	if now := fingerprint(cw.set.start); now != cw.started {
		cw.started = now
		cw.log.Warn().Strs("files", cw.set.start).
			Msg("a file read only at start (the CA, upstream.ca_file, admin.token_file) changed: restart the gateway to use it")
	}
	now := fingerprint(cw.set.reload)
	if now == cw.applied {
		return
	}
	cw.applied = now
	cw.log.Info().Msg("a watched file changed; reloading")
	if err := cw.reload(ctx); err != nil {
		return // logged and counted by reload; the old config stays
	}
	// The digest taken before the reload stays when the set of files is
	// the same: a change that raced the reload then differs from it and
	// reloads again.
	next := referencedFiles(cw.file)
	if !slices.Equal(next.reload, cw.set.reload) {
		cw.applied = fingerprint(next.reload)
	}
	cw.set = next
	if err := cw.watchDirs(); err != nil {
		cw.log.Error().Err(err).Msg("watching the config's directory")
	}
}

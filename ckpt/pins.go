package ckpt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultKeep is how long a job's last version (its last outputs and
// checkpoint) is kept after the job ends, unless the job says otherwise.
const DefaultKeep = 7 * 24 * time.Hour

// RetainPin is the pin name Retain uses.
const RetainPin = "retain"

type pinKey struct {
	job     string
	version uint64
	name    string
}

// Pin is one named hold on a committed version.
type Pin struct {
	Job     string
	Version uint64
	Name    string
	// Until is when the pin expires; zero means never (until Unpin).
	Until time.Time
}

// Pin holds committed version of job under name until until (zero: until
// Unpin). While a pin without expiry holds a version, eviction never
// removes it. A pin with an expiry holds it until then, but yields to
// data that must be kept when the store is full (only after every
// unpinned chunk is gone, earliest expiry first); once expired it holds
// nothing and Purge drops the version. Pinning again under the same name
// replaces the expiry. Pins are kept on disk.
func (s *Store) Pin(job string, version uint64, name string, until time.Time) error {
	if err := ValidJobID(name); err != nil {
		return fmt.Errorf("pin name: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pinLocked(pinKey{job, version, name}, until)
}

func (s *Store) pinLocked(k pinKey, until time.Time) error {
	if _, ok := s.committed[versionKey{k.job, k.version}]; !ok {
		return fmt.Errorf("pin %s v%d: %w", k.job, k.version, ErrNoVersion)
	}
	var ns int64
	if !until.IsZero() {
		ns = until.UnixNano()
		until = time.Unix(0, ns)
	}
	if err := s.writeFile(s.pinPath(k), []byte(strconv.FormatInt(ns, 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("pin %s v%d: %w", k.job, k.version, err)
	}
	s.pins[k] = until
	return nil
}

// Unpin removes a pin; removing one that is not there is no error.
func (s *Store) Unpin(job string, version uint64, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unpinLocked(pinKey{job, version, name})
}

func (s *Store) unpinLocked(k pinKey) error {
	if _, ok := s.pins[k]; !ok {
		return nil
	}
	if err := os.Remove(s.pinPath(k)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin %s v%d %s: %w", k.job, k.version, k.name, err)
	}
	delete(s.pins, k)
	return nil
}

// Pins returns the pins on job's versions, by version then name.
func (s *Store) Pins(job string) []Pin {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Pin
	for k, until := range s.pins {
		if k.job == job {
			out = append(out, Pin{Job: k.job, Version: k.version, Name: k.name, Until: until})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Version != out[j].Version {
			return out[i].Version < out[j].Version
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Retain keeps an ended job's last version (its last outputs and
// checkpoint) until until: it pins the newest committed version under
// RetainPin with that expiry, ends the job's live mark and drops its
// older versions that no other pin holds (a version retained before a
// newer one landed gives up its RetainPin). It returns the version kept.
func (s *Store) Retain(job string, until time.Time) (*Manifest, error) {
	if until.IsZero() {
		return nil, fmt.Errorf("retain %s: no expiry", job)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.versionsLocked(job)
	if len(vs) == 0 {
		return nil, fmt.Errorf("retain %s: %w", job, ErrNoVersion)
	}
	last := vs[len(vs)-1]
	if err := s.pinLocked(pinKey{job, last, RetainPin}, until); err != nil {
		return nil, fmt.Errorf("retain: %w", err)
	}
	if err := s.setLiveLocked(job, false); err != nil {
		return nil, fmt.Errorf("retain: %w", err)
	}
	for _, v := range vs[:len(vs)-1] {
		if err := s.unpinLocked(pinKey{job, v, RetainPin}); err != nil {
			return nil, fmt.Errorf("retain: %w", err)
		}
		if !s.hasPinLocked(job, v) {
			if err := s.dropVersionLocked(job, v); err != nil {
				return nil, fmt.Errorf("retain: %w", err)
			}
		}
	}
	return s.committed[versionKey{job, last}], nil
}

// Purge drops the pins that expired by now and every version that such a
// pin held and nothing holds any more (no other pin, not the newest
// version of a live job), with the chunks only they used. A job left
// with no version is remembered as purged (Purged). It returns the
// versions dropped.
func (s *Store) Purge(now time.Time) ([]*Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	held := map[versionKey]bool{}
	for k, until := range s.pins {
		if until.IsZero() || now.Before(until) {
			continue
		}
		if err := s.unpinLocked(k); err != nil {
			errs = append(errs, err)
			continue
		}
		held[versionKey{k.job, k.version}] = true
	}
	var dropped []*Manifest
	for k := range held {
		m, ok := s.committed[k]
		if !ok || s.hasPinLocked(k.job, k.version) {
			continue
		}
		if vs := s.versionsLocked(k.job); s.live[k.job] && vs[len(vs)-1] == k.version {
			continue
		}
		if err := s.dropVersionLocked(k.job, k.version); err != nil {
			errs = append(errs, err)
			continue
		}
		dropped = append(dropped, m)
		if len(s.versionsLocked(k.job)) == 0 {
			if err := s.markPurgedLocked(k.job, now); err != nil {
				errs = append(errs, err)
			}
		}
	}
	sort.Slice(dropped, func(i, j int) bool {
		if dropped[i].JobID != dropped[j].JobID {
			return dropped[i].JobID < dropped[j].JobID
		}
		return dropped[i].Version < dropped[j].Version
	})
	return dropped, errors.Join(errs...)
}

// Purged reports whether the store purged job's last version (its
// retention ran out, or the store, full, had to evict it early) and when;
// a new version of the job clears the mark.
func (s *Store) Purged(job string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.purged[job]
	return t, ok
}

func (s *Store) markPurgedLocked(job string, at time.Time) error {
	if err := s.writeFile(filepath.Join(s.root, "purged", job), []byte(strconv.FormatInt(at.UnixNano(), 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("mark %s purged: %w", job, err)
	}
	s.purged[job] = time.Unix(0, at.UnixNano())
	return nil
}

func (s *Store) hasPinLocked(job string, version uint64) bool {
	for k := range s.pins {
		if k.job == job && k.version == version {
			return true
		}
	}
	return false
}

// dropPinsLocked removes the pins of a version that is gone and reports
// whether one of them had an expiry not reached yet (the version was
// retained).
func (s *Store) dropPinsLocked(job string, version uint64) (retained bool) {
	now := s.now()
	for k, until := range s.pins {
		if k.job == job && k.version == version {
			retained = retained || (!until.IsZero() && now.Before(until))
			if err := s.unpinLocked(k); err != nil {
				s.log.Warn("ckpt: removing the pin of a dropped version", "err", err)
			}
		}
	}
	return retained
}

func (s *Store) pinPath(k pinKey) string {
	return filepath.Join(s.root, "pins", k.job, fmt.Sprintf("%020d~%s", k.version, k.name))
}

// loadPins reads pins/ and purged/ at Open.
func (s *Store) loadPins() error {
	jobs, err := os.ReadDir(filepath.Join(s.root, "pins"))
	if err != nil {
		return err
	}
	for _, j := range jobs {
		files, err := os.ReadDir(filepath.Join(s.root, "pins", j.Name()))
		if err != nil {
			return err
		}
		for _, f := range files {
			p := filepath.Join(s.root, "pins", j.Name(), f.Name())
			vs, name, ok := strings.Cut(f.Name(), "~")
			v, verr := strconv.ParseUint(vs, 10, 64)
			b, rerr := os.ReadFile(p)
			ns, nerr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if !ok || verr != nil || rerr != nil || nerr != nil || ValidJobID(name) != nil {
				s.log.Warn("ckpt: ignoring unreadable pin", "path", p)
				continue
			}
			var until time.Time
			if ns != 0 {
				until = time.Unix(0, ns)
			}
			s.pins[pinKey{j.Name(), v, name}] = until
		}
	}
	purged, err := os.ReadDir(filepath.Join(s.root, "purged"))
	if err != nil {
		return err
	}
	for _, f := range purged {
		b, err := os.ReadFile(filepath.Join(s.root, "purged", f.Name()))
		if err != nil {
			return err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			s.log.Warn("ckpt: ignoring unreadable purge mark", "job", f.Name())
			continue
		}
		s.purged[f.Name()] = time.Unix(0, ns)
	}
	return nil
}

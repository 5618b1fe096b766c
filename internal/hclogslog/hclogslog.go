// Package hclogslog lets HashiCorp libraries log through log/slog:
// hashicorp/raft takes an hclog.Logger, whose calls (level, message,
// key/value pairs) become slog records with the same level and fields;
// memberlist takes a *log.Logger, whose "[LEVEL] text" lines become
// records at that level. Errors about one peer that repeat (a departed
// node's heartbeats) are logged once per window with a count of those
// left out, so a node that left does not flood the log.
package hclogslog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// LevelTrace is hclog's Trace level in slog terms, below Debug.
const LevelTrace = slog.LevelDebug - 4

// DefaultRepeatWindow is how long a repeated warning or error about the
// same peer is held back after it was logged.
const DefaultRepeatWindow = 30 * time.Second

// Options tune a Logger.
type Options struct {
	// Level is the least level passed on (hclog's guards, IsDebug and
	// the others, answer by it as well as by the handler).
	Level slog.Level
	// RepeatWindow: see DefaultRepeatWindow; negative: nothing held back.
	RepeatWindow time.Duration
	// Now is the clock of the repeat windows (time.Now if nil).
	Now func() time.Time
}

// New returns an hclog.Logger named name that logs to l.
func New(l *slog.Logger, name string, opts Options) hclog.Logger {
	if opts.RepeatWindow == 0 {
		opts.RepeatWindow = DefaultRepeatWindow
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	lv := &slog.LevelVar{}
	lv.Set(opts.Level)
	return &logger{l: l, name: name, level: lv, rep: &repeats{window: opts.RepeatWindow, now: opts.Now, seen: map[string]*repeat{}}}
}

type logger struct {
	l       *slog.Logger
	name    string
	implied []any
	level   *slog.LevelVar
	rep     *repeats
}

func toSlog(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return LevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

func toHCLog(l slog.Level) hclog.Level {
	switch {
	case l <= LevelTrace:
		return hclog.Trace
	case l <= slog.LevelDebug:
		return hclog.Debug
	case l <= slog.LevelInfo:
		return hclog.Info
	case l <= slog.LevelWarn:
		return hclog.Warn
	}
	return hclog.Error
}

func (g *logger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level == hclog.NoLevel {
		return
	}
	g.log(toSlog(level), msg, args)
}

func (g *logger) log(level slog.Level, msg string, args []any) {
	ctx := context.Background()
	if level < g.level.Level() || !g.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]any, 0, len(g.implied)+len(args)+4)
	if g.name != "" {
		attrs = append(attrs, "logger", g.name)
	}
	attrs = appendArgs(appendArgs(attrs, g.implied), args)
	if level >= slog.LevelWarn {
		left, ok := g.rep.allow(msg, args)
		if !ok {
			return
		}
		if left > 0 {
			attrs = append(attrs, "repeats_left_out", left)
		}
	}
	g.l.Log(ctx, level, msg, attrs...)
}

// appendArgs adds hclog's key/value pairs as slog's. A value without a
// key is hclog's EXTRA_VALUE_AT_END; hclog.Format values are formatted.
func appendArgs(attrs, args []any) []any {
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			return append(attrs, "EXTRA_VALUE_AT_END", value(args[i]))
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		attrs = append(attrs, key, value(args[i+1]))
	}
	return attrs
}

func value(v any) any {
	switch x := v.(type) {
	case hclog.Format:
		if len(x) > 0 {
			if f, ok := x[0].(string); ok {
				return fmt.Sprintf(f, x[1:]...)
			}
		}
		return fmt.Sprint(x...)
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	return v
}

func (g *logger) Trace(msg string, args ...any) { g.log(LevelTrace, msg, args) }
func (g *logger) Debug(msg string, args ...any) { g.log(slog.LevelDebug, msg, args) }
func (g *logger) Info(msg string, args ...any)  { g.log(slog.LevelInfo, msg, args) }
func (g *logger) Warn(msg string, args ...any)  { g.log(slog.LevelWarn, msg, args) }
func (g *logger) Error(msg string, args ...any) { g.log(slog.LevelError, msg, args) }

func (g *logger) enabled(l slog.Level) bool {
	return l >= g.level.Level() && g.l.Enabled(context.Background(), l)
}

func (g *logger) IsTrace() bool { return g.enabled(LevelTrace) }
func (g *logger) IsDebug() bool { return g.enabled(slog.LevelDebug) }
func (g *logger) IsInfo() bool  { return g.enabled(slog.LevelInfo) }
func (g *logger) IsWarn() bool  { return g.enabled(slog.LevelWarn) }
func (g *logger) IsError() bool { return g.enabled(slog.LevelError) }

func (g *logger) ImpliedArgs() []any { return append([]any(nil), g.implied...) }

func (g *logger) With(args ...any) hclog.Logger {
	c := *g
	c.implied = append(append([]any(nil), g.implied...), args...)
	return &c
}

func (g *logger) Name() string { return g.name }

func (g *logger) Named(name string) hclog.Logger {
	c := *g
	if g.name != "" {
		name = g.name + "." + name
	}
	c.name = name
	return &c
}

func (g *logger) ResetNamed(name string) hclog.Logger {
	c := *g
	c.name = name
	return &c
}

func (g *logger) SetLevel(level hclog.Level) { g.level.Set(toSlog(level)) }
func (g *logger) GetLevel() hclog.Level      { return toHCLog(g.level.Level()) }

func (g *logger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(g.StandardWriter(opts), "", 0)
}

// StandardWriter takes the lines of a standard library logger: with
// InferLevels, a "[LEVEL]" marker (memberlist writes "[WARN] memberlist:
// text") sets the record's level and is removed from the message, as is
// the library's "name: " prefix when it is the logger's name.
func (g *logger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	w := &stdWriter{g: g, level: slog.LevelInfo}
	if opts != nil {
		w.infer = opts.InferLevels
		if opts.ForceLevel != hclog.NoLevel {
			w.level, w.forced = toSlog(opts.ForceLevel), true
		}
	}
	return w
}

type stdWriter struct {
	g      *logger
	infer  bool
	forced bool
	level  slog.Level
}

var levelMarks = []struct {
	mark  string
	level slog.Level
}{
	{"[TRACE]", LevelTrace}, {"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}, {"[ERROR]", slog.LevelError},
}

func (w *stdWriter) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(string(bytes.TrimRight(p, "\n")), "\n") {
		level, msg := w.level, strings.TrimSpace(line)
		if w.infer || w.forced {
			for _, m := range levelMarks {
				if rest, ok := strings.CutPrefix(msg, m.mark); ok {
					msg = strings.TrimSpace(rest)
					if !w.forced {
						level = m.level
					}
					break
				}
			}
		}
		if w.g.name != "" {
			msg = strings.TrimPrefix(msg, w.g.name+": ")
		}
		w.g.log(level, msg, nil)
	}
	return len(p), nil
}

// repeats holds back warnings and errors about a peer that repeat within
// a window. They are keyed by message and the value of their "peer"
// argument; records without one are never held back.
type repeats struct {
	window time.Duration
	now    func() time.Time
	mu     sync.Mutex
	seen   map[string]*repeat
}

type repeat struct {
	logged time.Time // when one was last logged
	left   int       // held back since
}

// allow reports whether a record may be logged, and how many like it were
// held back since the last one that was.
func (r *repeats) allow(msg string, args []any) (int, bool) {
	if r.window < 0 {
		return 0, true
	}
	peer := ""
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "peer" {
			peer = fmt.Sprint(args[i+1])
			break
		}
	}
	if peer == "" {
		return 0, true
	}
	key := msg + "\x00" + peer
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.seen[key]
	if !ok {
		if len(r.seen) > 1024 { // bounded: forget the old ones
			for k, v := range r.seen {
				if now.Sub(v.logged) > r.window {
					delete(r.seen, k)
				}
			}
		}
		r.seen[key] = &repeat{logged: now}
		return 0, true
	}
	if now.Sub(e.logged) < r.window {
		e.left++
		return 0, false
	}
	left := e.left
	e.logged, e.left = now, 0
	return left, true
}

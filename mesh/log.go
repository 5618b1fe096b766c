package mesh

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
)

// logWriter turns memberlist's "[LEVEL] memberlist: text" lines into slog
// records at the matching level.
type logWriter struct{ logger *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(bytes.TrimRight(p, "\n")))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{
		"[DEBUG]": slog.LevelDebug, "[INFO]": slog.LevelInfo,
		"[WARN]": slog.LevelWarn, "[ERR]": slog.LevelError, "[ERROR]": slog.LevelError,
	} {
		if i := strings.Index(line, prefix); i >= 0 {
			level = l
			line = strings.TrimSpace(line[i+len(prefix):])
			break
		}
	}
	w.logger.Log(context.Background(), level, line)
	return len(p), nil
}

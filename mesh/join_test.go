package mesh

import (
	"errors"
	"strings"
	"testing"
)

// TestJoinErrorIsOneLine: a failed join says which peers failed and why on
// one line, without memberlist's "N errors occurred:" heading.
func TestJoinErrorIsOneLine(t *testing.T) {
	cfg := DefaultLocalConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.AllowPlaintext, cfg.Logger = "lonely", "127.0.0.1", 0, true, discardLogger()
	m, err := Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown()
	_, err = m.Join([]string{"127.0.0.1:1", "127.0.0.1:2"})
	if err == nil {
		t.Fatal("joining closed ports succeeded")
	}
	msg := err.Error()
	if !errors.Is(err, ErrPeerUnreachable) || strings.Contains(msg, "occurred") || strings.Contains(msg, "\n") ||
		!strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "; ") || !strings.Contains(msg, "127.0.0.1:2") {
		t.Errorf("join error %q: want one line naming both peers, wrapping ErrPeerUnreachable", msg)
	}
}

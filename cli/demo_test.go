package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A wrong demo command line exits 2 with the reason, before anything
// starts; a work dir holding something else is refused (exit 1) and kept.
func TestDemoUsage(t *testing.T) {
	full := t.TempDir()
	keep := filepath.Join(full, "keep-me")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"too few nodes", []string{"demo", "--nodes", "3"}, ExitUsage, "--nodes 3"},
		{"too many nodes", []string{"demo", "--nodes", "13"}, ExitUsage, "4 to 12"},
		{"no buildings", []string{"demo", "--buildings", "0"}, ExitUsage, "--buildings 0"},
		{"more buildings than nodes", []string{"demo", "--nodes", "4", "--buildings", "5"}, ExitUsage, "want 1 to 4"},
		{"unknown job", []string{"demo", "--job", "tensorflow"}, ExitUsage, "auto, pytorch or synthetic"},
		{"short notice", []string{"demo", "--notice", "1s"}, ExitUsage, "--notice"},
		{"negative duration", []string{"demo", "--duration", "-1s"}, ExitUsage, "--duration"},
		{"bad duration", []string{"demo", "--duration", "soon"}, ExitUsage, "duration"},
		{"unknown flag", []string{"demo", "--gpus", "2"}, ExitUsage, "gpus"},
		{"argument", []string{"demo", "now"}, ExitUsage, `unexpected argument "now"`},
		{"work dir not empty", []string{"demo", "--dir", full, "--job", "synthetic", "--http", "127.0.0.1:0"}, ExitError, "is not empty"},
		{"demo-job bad state", []string{"demo-job", "--state", "lots"}, ExitUsage, "--state"},
		{"demo-job zero step time", []string{"demo-job", "--step-time", "0s"}, ExitUsage, "--step-time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(t, tt.args...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want exit %d with %q", code, errOut, tt.wantCode, tt.wantErr)
			}
		})
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the refused work dir lost its file: %v", err)
	}
	// demo-job is hidden from the command list; demo is listed.
	_, out, _ := runCLI(t, "--help")
	if !strings.Contains(out, "demo ") || strings.Contains(out, "demo-job") {
		t.Errorf("command list: want demo listed and demo-job hidden:\n%s", out)
	}
}

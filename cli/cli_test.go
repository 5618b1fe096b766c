package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code = run(context.Background(), env, append([]string{"reclaimnet"}, args...))
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // substring of stdout
		wantErr  string // substring of stderr
	}{
		{"no command", nil, ExitUsage, "", "Usage:\n  reclaimnet [flags]"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, "", `unknown command "frobnicate"`},
		{"help lists commands", []string{"help"}, ExitOK, "version", ""},
		{"--help", []string{"--help"}, ExitOK, "Node and cluster:", ""},
		{"help for one command", []string{"help", "version"}, ExitOK, "Usage:\n  reclaimnet version", ""},
		{"help unknown", []string{"help", "nope"}, ExitUsage, "", `unknown command "nope"`},
		{"version", []string{"version"}, ExitOK, "reclaimnet v", ""},
		{"--version", []string{"--version"}, ExitOK, "reclaimnet v", ""},
		{"version bad flag", []string{"version", "--bogus"}, ExitUsage, "", "reclaimnet version: unknown flag --bogus"},
		{"version extra arg", []string{"version", "x"}, ExitUsage, "", "version takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", code, tt.wantCode, errOut)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("stdout: got %q, want it to contain %q", out, tt.wantOut)
			}
			if !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("stderr: got %q, want it to contain %q", errOut, tt.wantErr)
			}
		})
	}
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/reclaimnet/reclaimnet/localapi"
)

// DataDirEnv names the environment variable that tells the CLI which
// agent to talk to when --data-dir is not given.
const DataDirEnv = "RECLAIMNET_DATA_DIR"

// defaultDataDir is where a production agent keeps its state.
const defaultDataDir = "/var/lib/reclaimnet"

// dataDirFlag adds --data-dir to a client command's flags.
func dataDirFlag(fs *pflag.FlagSet) *string {
	return fs.String("data-dir", "", "data `dir` of the local agent (default $"+DataDirEnv+", else "+defaultDataDir+")")
}

// resolveDataDir picks the agent: the flag, the environment, the default.
func resolveDataDir(env *Env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := env.Getenv(DataDirEnv); v != "" {
		return v
	}
	return defaultDataDir
}

// callAgent sends one request to the local agent and turns an error
// answer into a Go error with a hint.
func callAgent(ctx context.Context, dataDir string, req localapi.Request) (localapi.Response, error) {
	return callAgentWithin(ctx, dataDir, req, 60*time.Second)
}

// callAgentWithin is callAgent for a request that may take up to timeout.
func callAgentWithin(ctx context.Context, dataDir string, req localapi.Request, timeout time.Duration) (localapi.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := localapi.Call(ctx, dataDir, req)
	if err != nil {
		return resp, err
	}
	if resp.Error != "" {
		switch resp.Kind {
		case localapi.KindPeerUnreachable:
			return resp, fmt.Errorf("%s (is the agent running there, and is its gossip port open?)", resp.Error)
		case localapi.KindWrongGossipKey:
			return resp, fmt.Errorf("%s", resp.Error)
		}
		return resp, errors.New(resp.Error)
	}
	return resp, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

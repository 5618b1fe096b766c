package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

func init() {
	register(&command{
		name:     "keygen",
		synopsis: "print a new random gossip encryption key",
		usage:    "reclaimnet keygen\n\nPrints 32 random bytes in base64 for 'reclaimnet agent --gossip-key'.",
		run:      runKeygen,
	})
}

func runKeygen(_ context.Context, env *Env, args []string) error {
	fs := newFlagSet(env, "keygen")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("keygen takes no arguments")
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("read random bytes: %w", err)
	}
	fmt.Fprintln(env.Stdout, base64.StdEncoding.EncodeToString(key))
	return nil
}

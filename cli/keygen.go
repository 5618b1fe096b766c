package cli

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/spf13/cobra"
)

func init() { register(newKeygenCmd) }

func newKeygenCmd(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:     "keygen",
		Short:   "print a new random gossip encryption key",
		Long:    "Prints 32 random bytes in base64, for 'reclaimnet agent --gossip-key-file' (reclaimnet keygen > FILE).",
		GroupID: groupSetup,
		Args:    noArgs,
		RunE:    func(*cobra.Command, []string) error { return runKeygen(env) },
	}
}

func runKeygen(env *Env) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("read random bytes: %w", err)
	}
	fmt.Fprintln(env.Stdout, base64.StdEncoding.EncodeToString(key))
	return nil
}

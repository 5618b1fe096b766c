package cli

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/reclaimnet/reclaimnet/pki"
)

func init() { register(newKeygenCmd) }

func newKeygenCmd(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "print a new random gossip encryption key",
		Long: `Prints 32 random bytes in base64, for 'reclaimnet agent --gossip-key-file'. With --out the key
goes to a new file of mode 0600 instead (the agent refuses a key file other users can read);
an existing file is never replaced. 'reclaimnet agent --bootstrap' makes the key itself.`,
		GroupID: groupSetup,
		Args:    noArgs,
	}
	out := cmd.Flags().String("out", "", "write the key to this new `file` (mode 0600) instead of printing it")
	cmd.RunE = func(*cobra.Command, []string) error { return runKeygen(env, *out) }
	return cmd
}

func runKeygen(env *Env, out string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("read random bytes: %w", err)
	}
	text := base64.StdEncoding.EncodeToString(key)
	if out == "" {
		fmt.Fprintln(env.Stdout, text)
		return nil
	}
	if err := pki.CreateSecretFile(out, []byte(text+"\n")); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "wrote a new gossip key to %s (mode 0600)\n", out)
	return nil
}

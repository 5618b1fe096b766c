package pytorch

import (
	"bytes"
	"os"
	"testing"
)

// The embedded copy is the file on disk: the demo runs exactly the example.
func TestFilesAreTheExample(t *testing.T) {
	for _, name := range []string{"train.py", "reclaimnet_ckpt.py"} {
		embedded, err := Files.ReadFile(name)
		if err != nil {
			t.Fatalf("%s not embedded: %v", name, err)
		}
		disk, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(embedded, disk) || len(disk) == 0 {
			t.Errorf("%s: embedded %d bytes differ from the %d on disk", name, len(embedded), len(disk))
		}
	}
}

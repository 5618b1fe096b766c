package localapi

// OpFetch downloads a job's outputs (and, on request, its last checkpoint)
// from a node that holds them to this machine (reclaimnet fetch).
const OpFetch = "fetch"

// More error kinds for OpFetch.
const (
	// KindPurged: the job's results were kept for their time and purged.
	KindPurged = "purged"
	// KindNoOutputs: the job has no version (yet) any node holds.
	KindNoOutputs = "no_outputs"
	// KindDiskFull: this machine's disk filled up: for OpFetch what
	// arrived is kept for the next try; for OpRun the bundle did not fit
	// in the data directory and nothing was submitted.
	KindDiskFull = "disk_full"
)

// FetchRequest is what OpFetch writes where (absolute paths on the
// agent's machine, each absent or an empty directory).
type FetchRequest struct {
	Out string `json:"out"`
	// CheckpointOut receives the checkpoint files of the same version;
	// empty: outputs only.
	CheckpointOut string `json:"checkpoint_out,omitempty"`
}

// FetchInfo is what OpFetch delivered.
type FetchInfo struct {
	Job     string `json:"job"`
	Version uint64 `json:"version"`
	// From is the node that served it.
	From          string `json:"from"`
	Out           string `json:"out"`
	CheckpointOut string `json:"checkpoint_out,omitempty"`
	// Files and Bytes count the outputs' files and their bytes.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Received chunks came over the network now; AlreadyHad were kept by
	// an interrupted earlier fetch to the same place.
	Received      int   `json:"received_chunks"`
	AlreadyHad    int   `json:"already_had_chunks"`
	ReceivedBytes int64 `json:"received_bytes"`
}

package enroll

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ALPN is the TLS application protocol of enrollment on the coordinator
// port.
const ALPN = "reclaimnet-enroll/1"

// MaxFrame bounds one message. The largest is a join's answer (a CA and a
// node certificate, a few gossip keys: under 8 KiB); 64 KiB leaves room
// and bounds what a stranger can make a node buffer.
const MaxFrame = 64 << 10

// wireVersion is the only message version read; any other is refused.
const wireVersion = 1

// Operations a request names.
const (
	opJoin      = "join"       // token + CSR → certificate, CA, gossip keys
	opRenew     = "renew"      // CSR, over the node's current certificate → certificate
	opVoterKeys = "voter-keys" // over a voter's certificate → sealed voter keys
	opJobSecret = "job-secret" // job + name, over the host's certificate → the secret resealed to it
)

// request is what a joining or renewing node sends: one per connection.
type request struct {
	V     int    `json:"v"`
	Op    string `json:"op"`
	Token string `json:"token,omitempty"`
	CSR   []byte `json:"csr,omitempty"` // PKCS#10 DER
	// Job and Name name a job's secret (job-secret).
	Job  string `json:"job,omitempty"`
	Name string `json:"name,omitempty"`
}

// response is the one answer: a refusal (Code set) or what was asked for.
type response struct {
	V          int      `json:"v"`
	Code       string   `json:"code,omitempty"`
	Message    string   `json:"message,omitempty"`
	Cert       []byte   `json:"cert,omitempty"` // PEM
	CA         []byte   `json:"ca,omitempty"`   // PEM
	GossipKeys [][]byte `json:"gossip_keys,omitempty"`
	// GossipAddr is where the answering member gossips (a join's answer):
	// the joiner was given its coordinator address and joins gossip there.
	GossipAddr string `json:"gossip_addr,omitempty"`
	Sealed     []byte `json:"sealed,omitempty"` // voter keys or a job's secret, sealed to the asker
}

// writeFrame sends v as JSON after a 4-byte big-endian length.
func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxFrame {
		return fmt.Errorf("enroll: message of %d bytes is over the %d-byte limit", len(b), MaxFrame)
	}
	// One write, so header and body travel in one TLS record.
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(frame, b...))
	return err
}

// readFrame reads one length-prefixed message, refusing an empty one or
// one over MaxFrame before reading (or allocating) its body.
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes (want 1..%d)", ErrBadRequest, n, MaxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeStrict decodes exactly one JSON object into v, refusing unknown
// fields and trailing bytes.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: trailing data after the message", ErrBadRequest)
	}
	return nil
}

// decodeRequest parses and checks a request's shape: version, operation,
// and the fields that operation needs and no others. What the fields hold
// (the token, the CSR) the handler checks.
func decodeRequest(b []byte) (*request, error) {
	var req request
	if err := decodeStrict(b, &req); err != nil {
		return nil, err
	}
	if req.V != wireVersion {
		return nil, fmt.Errorf("%w: message version %d (this node reads %d)", ErrBadRequest, req.V, wireVersion)
	}
	if req.Op != opJobSecret && (req.Job != "" || req.Name != "") {
		return nil, fmt.Errorf("%w: only a job-secret request names a job", ErrBadRequest)
	}
	switch req.Op {
	case opJobSecret:
		if req.Token != "" || len(req.CSR) != 0 || req.Job == "" || req.Name == "" {
			return nil, fmt.Errorf("%w: a job-secret request names a job and a variable, and carries nothing else", ErrBadRequest)
		}
	case opJoin:
		if req.Token == "" || len(req.CSR) == 0 {
			return nil, fmt.Errorf("%w: a join needs a token and a CSR", ErrBadRequest)
		}
	case opRenew:
		if req.Token != "" || len(req.CSR) == 0 {
			return nil, fmt.Errorf("%w: a renewal carries a CSR and no token", ErrBadRequest)
		}
	case opVoterKeys:
		if req.Token != "" || len(req.CSR) != 0 {
			return nil, fmt.Errorf("%w: a voter-keys request carries nothing", ErrBadRequest)
		}
	default:
		return nil, fmt.Errorf("%w: unknown operation %q", ErrBadRequest, req.Op)
	}
	return &req, nil
}

// decodeResponse parses a response; its contents the client checks.
func decodeResponse(b []byte) (*response, error) {
	var resp response
	if err := decodeStrict(b, &resp); err != nil {
		return nil, err
	}
	if resp.V != wireVersion {
		return nil, fmt.Errorf("%w: answer version %d (this node reads %d)", ErrBadRequest, resp.V, wireVersion)
	}
	return &resp, nil
}

package owner

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// ErrBadOutlook is wrapped by the errors DecodeOutlook returns.
var ErrBadOutlook = errors.New("bad owner outlook")

// outlookVersion is the first byte of an encoded Outlook.
const outlookVersion = 1

// OutlookMaxLen bounds an encoded Outlook (two bytes and two varints), so
// it fits beside the rest of a node's gossip metadata (memberlist caps
// it at 512 bytes).
const OutlookMaxLen = 2 + 2*binary.MaxVarintLen64

// maxUnix is 9999-12-31T23:59:59Z: later times are not plausible.
const maxUnix = 253402300799

// stateCodes numbers the states on the wire; the order never changes.
var stateCodes = []NodeState{"", StateLent, StateReclaiming, StateOwnerActive, StateReclaimed, StateOutside, StateRateLimited, StateIdle}

// Outlook is a machine's known future as other nodes see it: lent Until a
// planned reclaim's deadline (zero: no end known), or, while not lent,
// lendable again From (zero: not known; only the owner can lend it).
// Times have whole seconds.
type Outlook struct {
	State NodeState `json:"state"`
	Until time.Time `json:"until,omitzero"`
	From  time.Time `json:"from,omitzero"`
}

// Lent reports whether guests may run on the machine (a reclaim with a
// notice still lets them finish their hand-off).
func (o Outlook) Lent() bool { return o.State == StateLent || o.State == StateReclaiming }

func (o Outlook) String() string {
	switch {
	case !o.Until.IsZero():
		return fmt.Sprintf("%s until %s", o.State, o.Until.UTC().Format(time.RFC3339))
	case !o.From.IsZero():
		return fmt.Sprintf("%s, lendable from %s", o.State, o.From.UTC().Format(time.RFC3339))
	}
	return string(o.State)
}

// Encode writes the outlook in at most OutlookMaxLen bytes: a version
// byte, the state's code, then Until and From as uvarint Unix seconds (0
// for a zero time).
func (o Outlook) Encode() ([]byte, error) {
	code := -1
	for i, s := range stateCodes {
		if i > 0 && s == o.State {
			code = i
		}
	}
	switch {
	case code < 0:
		return nil, fmt.Errorf("%w: unknown state %q", ErrBadOutlook, o.State)
	case o.Lent() && !o.From.IsZero():
		return nil, fmt.Errorf("%w: %s with a from time", ErrBadOutlook, o.State)
	case !o.Lent() && !o.Until.IsZero():
		return nil, fmt.Errorf("%w: %s with an until time", ErrBadOutlook, o.State)
	}
	b := []byte{outlookVersion, byte(code)}
	for _, t := range []time.Time{o.Until, o.From} {
		u, err := wireTime(t)
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, u)
	}
	return b, nil
}

func wireTime(t time.Time) (uint64, error) {
	if t.IsZero() {
		return 0, nil
	}
	u := t.Unix()
	if u <= 0 || u > maxUnix {
		return 0, fmt.Errorf("%w: time %v out of range", ErrBadOutlook, t)
	}
	return uint64(u), nil
}

// DecodeOutlook reads what Encode wrote (a peer's bytes: it checks
// everything, and only Encode's exact output is accepted).
func DecodeOutlook(b []byte) (Outlook, error) {
	if len(b) < 2 || len(b) > OutlookMaxLen {
		return Outlook{}, fmt.Errorf("%w: %d bytes", ErrBadOutlook, len(b))
	}
	if b[0] != outlookVersion {
		return Outlook{}, fmt.Errorf("%w: version %d, want %d", ErrBadOutlook, b[0], outlookVersion)
	}
	if b[1] == 0 || int(b[1]) >= len(stateCodes) {
		return Outlook{}, fmt.Errorf("%w: state code %d", ErrBadOutlook, b[1])
	}
	o := Outlook{State: stateCodes[b[1]]}
	rest := b[2:]
	for _, dst := range []*time.Time{&o.Until, &o.From} {
		u, n := binary.Uvarint(rest)
		if n <= 0 {
			return Outlook{}, fmt.Errorf("%w: truncated time", ErrBadOutlook)
		}
		if u > maxUnix {
			return Outlook{}, fmt.Errorf("%w: time %d out of range", ErrBadOutlook, u)
		}
		if u > 0 {
			*dst = time.Unix(int64(u), 0).UTC()
		}
		rest = rest[n:]
	}
	if len(rest) > 0 {
		return Outlook{}, fmt.Errorf("%w: %d trailing bytes", ErrBadOutlook, len(rest))
	}
	again, err := o.Encode()
	if err != nil {
		return Outlook{}, err
	}
	if !bytes.Equal(again, b) {
		return Outlook{}, fmt.Errorf("%w: not in canonical form", ErrBadOutlook)
	}
	return o, nil
}

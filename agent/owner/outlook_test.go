package owner

import (
	"errors"
	"testing"
	"time"
)

func TestOutlookRoundTrip(t *testing.T) {
	until := time.Date(2026, 3, 3, 7, 0, 0, 0, time.UTC)
	for _, o := range []Outlook{
		{State: StateLent},
		{State: StateLent, Until: until},
		{State: StateReclaiming, Until: until},
		{State: StateOwnerActive, From: until},
		{State: StateReclaimed},
		{State: StateOutside, From: until},
		{State: StateRateLimited, From: until},
		{State: StateIdle},
	} {
		b, err := o.Encode()
		if err != nil {
			t.Fatalf("%v: %v", o, err)
		}
		if len(b) > OutlookMaxLen || len(b) > 12 {
			t.Errorf("%v: %d bytes, want at most 12", o, len(b))
		}
		got, err := DecodeOutlook(b)
		if err != nil || got != o {
			t.Errorf("%v: decoded %v, %v", o, got, err)
		}
	}
	// Sub-second parts are dropped on the wire.
	b, _ := Outlook{State: StateLent, Until: until.Add(300 * time.Millisecond)}.Encode()
	if got, _ := DecodeOutlook(b); !got.Until.Equal(until) {
		t.Errorf("until %v, want %v", got.Until, until)
	}
}

func TestOutlookRejects(t *testing.T) {
	good, _ := Outlook{State: StateLent, Until: time.Unix(1772521200, 0)}.Encode()
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"one byte", []byte{1}},
		{"version 2", append([]byte{2}, good[1:]...)},
		{"state 0", []byte{1, 0, 0, 0}},
		{"unknown state", []byte{1, byte(len(stateCodes)), 0, 0}},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
		{"not canonical", []byte{1, 1, 0x80, 0x00, 0}},
		{"lent with a from", []byte{1, 1, 0, 5}},
		{"owner active with an until", []byte{1, 3, 5, 0}},
		{"year 10000", append([]byte{1, 1}, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0)},
		{"too long", make([]byte, OutlookMaxLen+1)},
	} {
		if o, err := DecodeOutlook(tc.b); !errors.Is(err, ErrBadOutlook) {
			t.Errorf("%s: decoded %v, %v; want ErrBadOutlook", tc.name, o, err)
		}
	}
	if _, err := (Outlook{State: "sleeping"}).Encode(); !errors.Is(err, ErrBadOutlook) {
		t.Errorf("unknown state encoded: %v", err)
	}
	if _, err := (Outlook{State: StateLent, Until: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)}).Encode(); !errors.Is(err, ErrBadOutlook) {
		t.Errorf("time before 1970 encoded: %v", err)
	}
}

// FuzzDecodeOutlook: peers' bytes never panic the decoder, and what it
// accepts is exactly what Encode writes for the value.
func FuzzDecodeOutlook(f *testing.F) {
	for _, o := range []Outlook{{State: StateLent, Until: time.Unix(1772521200, 0)}, {State: StateOutside, From: time.Unix(1772560800, 0)}, {State: StateIdle}} {
		b, _ := o.Encode()
		f.Add(b)
	}
	f.Add([]byte{1, 1, 0x80, 0x00, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := DecodeOutlook(b)
		if err != nil {
			return
		}
		again, err := o.Encode()
		if err != nil || string(again) != string(b) {
			t.Fatalf("decoded %v from %x, encodes to %x, %v", o, b, again, err)
		}
	})
}
